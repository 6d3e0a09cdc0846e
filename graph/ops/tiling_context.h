// The tiling sink's device tiling context (seed 003, 5.1): what an op's AICPU tiling task reads
// and writes, laid out in the model's tiling-data segment by gen-tasks.
//
//   | TilingContextHeader | compute-node info (info_bytes) |
//
// The header's block_dim and tiling_key are the words the AICPU tiling task writes and the task
// update reads (block_dim starts as kTilingSinkBlockDim: a kernel patched from an untouched
// context would still carry the placeholder). The compute-node info is what the tiling function
// needs besides the values: the op (type, name, attributes) and its input descriptors, as a
// serialized GraphDef of one Data node per input feeding the op (graph/ir/text_format.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "graph/ir/compute_graph.h"
#include "graph/ops/op_registry.h"

namespace npuflow::graph {

// "TS2N" (the layout with the block-split costs; "TSNK" before it is refused: recompile the model).
inline constexpr std::uint32_t kTilingContextMagic = 0x4E325354;
// The AICPU kernel that tiles a marked op on the device: args (context, tiling-depend inputs...).
inline constexpr const char* kAicpuTilingKernel = "aicpu.TilingSink";

struct TilingContextHeader {
  std::uint32_t magic = kTilingContextMagic;
  std::uint32_t block_dim = 0xFFFFFFFFu;  // written by the AICPU tiling task
  std::uint64_t tiling_key = 0;           // written by the AICPU tiling task
  std::uint64_t workspace_bytes = 0;      // the workspace the kernel was given (one host tiling run; + 20 KB for a custom op)
  std::uint32_t core_count = 0;           // the AICore cores the tiling spreads blocks over
  std::uint32_t info_bytes = 0;           // the compute-node info after the header
  // The block-split cost model (graph::TileTarget's costs), so the device caps splits as the host would.
  float block_dispatch_ns = 0;
  float block_host_gbps = 0;
  float block_host_gflops = 0;
  std::uint32_t reserved = 0;
};
static_assert(sizeof(TilingContextHeader) == 48);
inline constexpr std::uint64_t kTilingContextBlockDimOffset = offsetof(TilingContextHeader, block_dim);
inline constexpr std::uint64_t kTilingContextTilingKeyOffset = offsetof(TilingContextHeader, tiling_key);

// The context's initial bytes for `op` with inputs `inputs`.
StatusOr<std::vector<std::uint8_t>> EncodeTilingContext(const OpDesc& op, const std::vector<TensorDesc>& inputs,
                                                        std::uint64_t workspace_bytes, const TileTarget& target);

// Ok for this layout's magic; for the layout before the block costs ("TSNK") a DataCorrupted that
// says to recompile the model; for anything else one that names the magic. `what` prefixes it.
Status CheckTilingContextMagic(std::uint32_t magic, std::string_view what);

// The target a context's tiling is for: its core count and block costs.
TileTarget TileTargetOf(const TilingContextHeader& h);

// What the AICPU tiling task reads back: the op and its inputs' descriptors. A context that is
// not one (bad magic, truncated, info that does not parse) is a DataCorrupted naming what.
struct TilingContextInfo {
  TilingContextHeader header;
  OpDesc op;
  std::vector<TensorDesc> inputs;
};
StatusOr<TilingContextInfo> DecodeTilingContext(std::span<const std::uint8_t> bytes);

// Registers kAicpuTilingKernel in npu_sim's kernel registry (ops/tiling_sink_kernel.cc; called by
// RegisterBuiltinOps): it needs the op registry's tiling functions, so it lives in this layer.
void RegisterTilingSinkKernel();

}  // namespace npuflow::graph
