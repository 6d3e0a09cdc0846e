#include "base/libcrypto.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace npuflow::internal {
namespace {

struct Loaded {
  LibCrypto table;
  std::string error;  // empty: every function resolved
};

Loaded Load() {
  Loaded out;
  // NPUFLOW_LIBCRYPTO names another copy of the library (a path or a soname), e.g. to check how
  // npuflow behaves without one.
  const char* env = std::getenv("NPUFLOW_LIBCRYPTO");
  const std::string lib_name = env != nullptr && *env != '\0' ? env : NPUFLOW_LIBCRYPTO_SONAME;
  // RTLD_NODELETE: the functions stay valid until the process ends, whoever holds them.
  void* lib = ::dlopen(lib_name.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (lib == nullptr) {
    const char* e = ::dlerror();
    out.error = "cannot load the library " + lib_name + ": " + (e ? e : "unknown error");
    return out;
  }
#define NPUFLOW_LIBCRYPTO_RESOLVE(name)                                                              \
  out.table.name = reinterpret_cast<decltype(out.table.name)>(::dlsym(lib, #name));                 \
  if (out.table.name == nullptr && out.error.empty())                                               \
    out.error = std::string("cannot find ") + #name + " in " + lib_name;
  NPUFLOW_LIBCRYPTO_FUNCTIONS(NPUFLOW_LIBCRYPTO_RESOLVE)
#undef NPUFLOW_LIBCRYPTO_RESOLVE
  return out;
}

const Loaded& Get() {
  static const Loaded loaded = Load();
  return loaded;
}

}  // namespace

Status CryptoStatus() {
  const Loaded& l = Get();
  if (l.error.empty()) return Status::Ok();
  return Status::Unsupported("{} (OpenSSL's libcrypto is needed for SHA-256 and AES-GCM; install libssl3)",
                                    l.error);
}

const LibCrypto& Crypto() {
  const Loaded& l = Get();
  if (!l.error.empty()) {
    std::fprintf(stderr, "npuflow: %s (needed for SHA-256 and AES-GCM)\n", l.error.c_str());
    std::abort();
  }
  return l.table;
}

}  // namespace npuflow::internal
