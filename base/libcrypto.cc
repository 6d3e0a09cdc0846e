#include "base/libcrypto.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace npuflow::internal {
namespace {

[[noreturn]] void CannotLoad(const char* what, const char* error) {
  std::fprintf(stderr, "npuflow: cannot load %s from %s (needed for SHA-256 and AES-GCM): %s\n", what,
               NPUFLOW_LIBCRYPTO_SONAME, error != nullptr ? error : "unknown error");
  std::abort();
}

LibCrypto Load() {
  // RTLD_NODELETE: the functions stay valid until the process ends, whoever holds them.
  void* lib = ::dlopen(NPUFLOW_LIBCRYPTO_SONAME, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (lib == nullptr) CannotLoad("the library", ::dlerror());
  LibCrypto c;
#define NPUFLOW_LIBCRYPTO_RESOLVE(name)                                       \
  c.name = reinterpret_cast<decltype(c.name)>(::dlsym(lib, #name));           \
  if (c.name == nullptr) CannotLoad(#name, ::dlerror());
  NPUFLOW_LIBCRYPTO_FUNCTIONS(NPUFLOW_LIBCRYPTO_RESOLVE)
#undef NPUFLOW_LIBCRYPTO_RESOLVE
  return c;
}

}  // namespace

const LibCrypto& Crypto() {
  static const LibCrypto crypto = Load();
  return crypto;
}

}  // namespace npuflow::internal
