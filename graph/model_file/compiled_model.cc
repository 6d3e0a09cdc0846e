#include "graph/model_file/compiled_model.h"

namespace npuflow::graph {

std::string_view SegmentName(Segment segment) {
  switch (segment) {
    case Segment::kNone: return "none";
    case Segment::kWeights: return "weights";
    case Segment::kFixedFeatureMap: return "fixed_fm";
    case Segment::kFeatureMap: return "fm";
    case Segment::kVariables: return "variables";
    case Segment::kInput: return "input";
    case Segment::kOutput: return "output";
    case Segment::kTilingData: return "tiling";
    case Segment::kFileConstant: return "file_constant";
  }
  return "unknown";
}

std::string_view TaskTypeName(TaskType type) {
  switch (type) {
    case TaskType::kKernel: return "kernel";
    case TaskType::kAicpuKernel: return "aicpu_kernel";
    case TaskType::kMemcpy: return "memcpy";
    case TaskType::kEventRecord: return "event_record";
    case TaskType::kEventWait: return "event_wait";
    case TaskType::kNop: return "nop";
    case TaskType::kTaskUpdate: return "task_update";
  }
  return "unknown";
}

}  // namespace npuflow::graph
