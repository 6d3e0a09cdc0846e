// Const <-> FileConstant (seed 000; ../shared/docs/GE_BEHAVIOUR.md, "External weights").
//
// Modes 1 and 2 move every non-empty Const of a graph (root and subgraphs) into weight files in
// one directory, named by content (SHA-256), and rewrite the node as a FileConstant:
//
//   mode 1  one file "weight_<sha256 hex>" per distinct value
//   mode 2  one file "<model name>_weight_combined" (else "<root graph name>_weight_combined",
//           else "weight_combined"); each new value appended at a 512-byte aligned offset
//
// The whole operation holds an exclusive flock on "<dir>/meta.json", the persistent map
// {"hash_to_weight_file": {hash: path}, "hash_to_weight_offset": {hash: offset}}, so compiles in
// several processes can share one directory. A hash already in meta.json whose file exists is not
// written again (identical weights share one file region, across compiles too): in mode 1 when
// "weight_<hash>" exists with the weight's size, in mode 2 when the file meta.json names holds
// offset + length bytes (the node then reads that file and offset). Mode 1 writes each file under
// a temporary name and renames it, so a reader never sees half a weight file.
//
// A converted node keeps its name and gets: location (the file's path), offset, length (bytes,
// unpadded), dtype, shape, original_shape, and _sha256 (the hex digest of its bytes, which the
// loader's --verify_weights checks).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "graph/ir/compute_graph.h"

namespace npuflow::weights {

// ge.externalWeight / --external_weight.
enum class ExternalWeightMode : std::uint8_t {
  kDefault,    // "": Consts stay embedded, FileConstants stay external
  kEmbedded,   // "0": every FileConstant becomes a Const
  kPerWeight,  // "1": one file per distinct weight
  kCombined,   // "2": one combined file
};
// "", "0", "1", "2". Anything else is a ParamInvalid naming `option` and the accepted values.
StatusOr<ExternalWeightMode> ParseExternalWeightMode(std::string_view value, std::string_view option);

inline constexpr std::uint64_t kCombinedAlignment = 512;
inline constexpr const char* kMetaFileName = "meta.json";

// ge.exec.value_bins: {"value_bins":[{"value_bin_id": ID, "value_bin_file": PATH}, ...]}. IDs are
// strings (a JSON number is taken as its decimal text). Malformed JSON, a missing field or a
// duplicate id is a ParamInvalid naming what was wrong.
using ValueBins = std::map<std::string, std::string, std::less<>>;
StatusOr<ValueBins> ParseValueBins(std::string_view json);

struct ConvertOptions {
  ExternalWeightMode mode = ExternalWeightMode::kPerWeight;
  std::string dir;          // the weight directory; created (with parents) when absent
  std::string model_name;   // mode 2: names the combined file; may be empty
  int writers = 8;          // mode 1: files written in parallel
};

// One weight file region a graph uses (CompiledGraphSummary::GetExternalWeightPaths).
struct ExternalWeightDesc {
  std::string path;   // the node's location (resolved as the loader resolves it, see below)
  std::uint64_t size = 0;    // bytes of the region (length)
  std::uint64_t offset = 0;  // in the file
  std::string id;            // the SHA-256 hex of the region, or "" when unknown
  std::vector<std::string> nodes;  // the FileConstants that read the region
};

struct ConvertResult {
  std::vector<ExternalWeightDesc> weights;  // one per distinct region, in file / offset order
  std::uint64_t bytes_hashed = 0;           // every Const's bytes
  std::uint64_t bytes_written = 0;          // bytes written to weight files (new hashes only; mode 2's
                                            // zero padding not counted)
  int files_written = 0;                    // mode 1: weight files written; mode 2: 1 when the
                                            // combined file grew, else 0
  int hash_threads = 0;                     // threads the hashing could use (the caller's arena)
  int writer_threads = 0;                   // threads the writing could use: at most
                                            // ConvertOptions::writers, fewer when oneTBB's process
                                            // limit is held lower (0 when nothing was written)
};

// Modes 1 and 2: Const -> FileConstant as described above. Consts with empty data stay Consts.
// FileConstants already in the graph are first read back (ConvertFileConstantToConst), so they
// are re-externalized into `options.dir` too. Errors name the directory, file or node.
StatusOr<ConvertResult> ConvertConstToFileConstant(graph::ComputeGraph& root, const ConvertOptions& options);

// FileConstant -> Const: each FileConstant (root and subgraphs) reads `length` bytes (the tensor
// size when length is 0) at `offset` of its file and becomes a Const. The file is `location`,
// else `file_path`, else `value_bins[file_id]`; relative paths are taken relative to `base_dir`
// when it is not empty. A node with none of the three is left alone. Errors: an empty or unknown
// file_id, a missing file, a read past the end of the file (all ParamInvalid / NotFound naming the
// node and file).
Status ConvertFileConstantToConst(graph::ComputeGraph& root, const ValueBins& value_bins = {},
                                  const std::string& base_dir = "");

// Sets `location` on each FileConstant that has only file_path or file_id, by the same rules.
Status ResolveFileConstantLocations(graph::ComputeGraph& root, const ValueBins& value_bins);

// The weight file regions the graph's FileConstants use (root and subgraphs), in (path, offset)
// order. `id` comes from the node's _sha256 attribute.
std::vector<ExternalWeightDesc> ListExternalWeights(const graph::ComputeGraph& root);

}  // namespace npuflow::weights
