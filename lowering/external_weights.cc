// external-weights (seed 000): applies ge.externalWeight to the graph.
//
//   ""   FileConstants that name their file by file_path or file_id get a location; Consts stay
//   "0"  every FileConstant is read back into a Const (its weights become part of the model)
//   "1"  every non-empty Const moves to its own file "weight_<sha256>" in the weight directory
//   "2"  every non-empty Const moves into one combined file, 512-byte aligned
//
// It runs after dead-code-elimination, so only weights the model uses reach the disk, and before
// plan-memory, which places Consts in the weights segment and FileConstants in file_constant.
// A converted node keeps its output descriptor: the Const's value.desc is the FileConstant's
// dtype and shape.
#include "lowering/pass.h"
#include "weights/convert.h"

namespace npuflow::lowering {

Status ExternalWeightsPass(PassContext& ctx) {
  const CompileOptions& options = ctx.options;
  NPUFLOW_ASSIGN_OR_RETURN(weights::ExternalWeightMode mode,
                           weights::ParseExternalWeightMode(options.external_weight, "ge.externalWeight"));
  weights::ValueBins value_bins;
  if (!options.value_bins.empty()) {
    NPUFLOW_ASSIGN_OR_RETURN(value_bins, weights::ParseValueBins(options.value_bins));
  }
  switch (mode) {
    case weights::ExternalWeightMode::kDefault:
      return weights::ResolveFileConstantLocations(ctx.graph, value_bins);
    case weights::ExternalWeightMode::kEmbedded:
      return weights::ConvertFileConstantToConst(ctx.graph, value_bins);
    case weights::ExternalWeightMode::kPerWeight:
    case weights::ExternalWeightMode::kCombined: {
      if (options.external_weight_dir.empty())
        return Status::ParamInvalid("external weights mode {} needs a weight directory", options.external_weight);
      // FileConstants named by file_id are read back (and re-externalized) like the others.
      NPUFLOW_RETURN_IF_ERROR(weights::ResolveFileConstantLocations(ctx.graph, value_bins));
      weights::ConvertOptions convert{
          .mode = mode, .dir = options.external_weight_dir, .model_name = options.model_name};
      return weights::ConvertConstToFileConstant(ctx.graph, convert).status();
    }
  }
  return Status::Internal("external-weights: unhandled mode '{}'", options.external_weight);
}

}  // namespace npuflow::lowering
