// `npuflow compile` and `npuflow info`: the atc-style compiler front end and the model inspector.
#pragma once

#include <ostream>
#include <string>

#include "base/status.h"

namespace npuflow::apps {

struct CompileArgs {
  std::string model;   // graph text (.pbtxt)
  std::string output;  // .om
  std::string chip = "910B";
  std::string stream_mode = "multi";  // single | multi
  int max_parallel = 8;
  std::string dump_after;          // a pass name, or empty
  std::string dump_format = "summary";  // summary | pbtxt
  bool verify = false;             // check the memory plan against the task lists
};

Status RunCompile(const CompileArgs& args, std::ostream& out);
// `tasks`: also list every stream's tasks; `placements`: every tensor's place.
Status RunInfo(const std::string& path, bool tasks, bool placements, std::ostream& out);

}  // namespace npuflow::apps
