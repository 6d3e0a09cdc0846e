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

// The table, loaded on the first call (thread-safe). When the library or one of its functions
// cannot be found (an installation without the libcrypto npuflow was built against), the process
// stops with a message naming the library and what was missing, as the dynamic loader would have
// at startup had it been linked.
const LibCrypto& Crypto();

}  // namespace npuflow::internal
