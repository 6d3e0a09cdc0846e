// Where external weights live on disk: the weight directory of a compile, and the move of its
// files next to a model file when the model is saved (seed 000, "路径管理").
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "graph/ir/compute_graph.h"

namespace npuflow::weights {

// The weight directory: `user_dir` (ge.externalWeightDir) when not empty, else
// "$ASCEND_WORK_PATH/tmp_weight_<pid>_<session_id>/" when that variable is set and not empty,
// else "./tmp_weight_<pid>_<session_id>/". The result ends without a '/'.
std::string ResolveWeightDir(const std::string& user_dir, std::uint64_t session_id);

// A directory npuflow made for one compile or session: its base name starts with "tmp_weight_".
bool IsTemporaryWeightDir(const std::string& dir);

// Saving a model at `model_path`: each FileConstant whose file lives in a temporary weight
// directory has the file moved (rename; copy + remove across file systems) to
// "<model dir>/weight/<file name>" and its `location` set to the bare file name. Files in other
// directories stay, and their nodes keep their locations. A file already moved by an earlier node
// is not moved again. Errors name the file and the destination.
Status RelocateWeightFiles(graph::ComputeGraph& root, const std::string& model_path);

// Removes a temporary weight directory and everything in it (a session's, on Finalize). A
// directory that is not temporary (IsTemporaryWeightDir) is never removed: ParamInvalid.
Status RemoveTemporaryWeightDir(const std::string& dir);

}  // namespace npuflow::weights
