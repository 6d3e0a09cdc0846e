// OpenSSL's libcrypto, loaded on first use. base/sha256 and base/aes_gcm call OpenSSL through
// this table; the library is opened (dlopen, the soname npuflow was built against) the first time
// something hashes or encrypts. Linked the usual way, it costs every process about 1.4 MB of
// resident memory (its relocations, symbol tables and initialized data) whether or not it is
// called; a `npuflow gpt2` run whose weights are neither verified nor encrypted never calls it.
// Internal to base/.
#pragma once

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "base/status.h"

namespace npuflow::internal {

#define NPUFLOW_LIBCRYPTO_FUNCTIONS(X)                                                                         \
  X(EVP_Digest) X(EVP_sha256) X(EVP_MD_CTX_new) X(EVP_MD_CTX_free) X(EVP_DigestInit_ex) X(EVP_DigestUpdate)   \
  X(EVP_DigestFinal_ex) X(EVP_CIPHER_CTX_new) X(EVP_CIPHER_CTX_free) X(EVP_CipherInit_ex) X(EVP_aes_256_gcm) \
  X(EVP_CipherUpdate) X(EVP_CipherFinal_ex) X(EVP_CIPHER_CTX_ctrl) X(OPENSSL_cleanse) X(RAND_bytes)

// The functions base/ uses, typed as OpenSSL's headers declare them.
struct LibCrypto {
#define NPUFLOW_LIBCRYPTO_MEMBER(name) decltype(&::name) name = nullptr;
  NPUFLOW_LIBCRYPTO_FUNCTIONS(NPUFLOW_LIBCRYPTO_MEMBER)
#undef NPUFLOW_LIBCRYPTO_MEMBER
};

// Whether the library and every function above could be loaded (loading it on the first call;
// thread-safe): a FailedPrecondition naming the library and what was missing when not (an
// installation without the libcrypto npuflow was built against). Every public entry point that
// hashes or encrypts returns this error before it calls Crypto().
Status CryptoStatus();

// The table (loading it on the first call). Reached without CryptoStatus() having said Ok, the
// process stops with CryptoStatus's message, as the dynamic loader would have at startup had the
// library been linked: a missing check is a bug, not an input error.
const LibCrypto& Crypto();

}  // namespace npuflow::internal
