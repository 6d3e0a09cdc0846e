// Small file-system helpers shared by the layers: where npuflow keeps its cache, and writing a
// file so that readers never see part of it.
#pragma once

#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>

#include "base/status.h"

namespace npuflow {

// $XDG_CACHE_HOME/npuflow, else $HOME/.cache/npuflow, else ./.npuflow-cache. Not created here.
std::filesystem::path UserCacheDirectory();

struct AtomicWriteOptions {
  bool sync = false;  // fsync the data before the rename (the model file does; bulk outputs need not)
  unsigned mode = 0644;  // less the process's umask, as for any newly created file
};

// Writes `path` through a temporary file beside it (mkstemp: concurrent writers never share one)
// that is renamed over `path` at the end, so a reader sees the old file or the whole new one.
// `write` fills the open temporary file (its name is given for messages) and returns its status;
// a failed write, flush, sync or rename removes the temporary file and leaves `path` as it was.
// Errors name `path` and the temporary file.
Status WriteFileAtomically(const std::string& path, const std::function<Status(std::FILE*, const std::string&)>& write,
                           AtomicWriteOptions options = {});

}  // namespace npuflow
