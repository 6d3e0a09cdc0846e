// ChipSpec: what a simulated chip is, loaded from the JSON files in npu_sim/chips/.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace npuflow::npu_sim {

using VTime = std::int64_t;  // virtual device time, nanoseconds

struct ChipSpec {
  std::string name;
  // What LoadChipSpec loaded it from (a shipped chip's name, or a JSON file's path), so a compiler
  // given this device's chip loads the same spec; empty for a spec built in code.
  std::string source;
  // `source`, or the name when there is none.
  const std::string& LoadName() const { return source.empty() ? name : source; }
  int aicore_count = 0;
  int aicpu_count = 0;
  std::uint64_t hbm_capacity_bytes = 0;
  double hbm_bandwidth_gbps = 0;  // GB/s (1e9 bytes per second)
  double h2d_bandwidth_gbps = 0;
  double d2h_bandwidth_gbps = 0;
  double d2d_bandwidth_gbps = 0;
  VTime dma_latency_ns = 0;
  int dma_channels = 0;
  VTime host_launch_latency_ns = 0;
  VTime event_record_latency_ns = 0;
  VTime event_wait_latency_ns = 0;
  VTime nop_latency_ns = 0;
  VTime kernel_launch_overhead_ns = 0;
  VTime aicpu_launch_overhead_ns = 0;
  VTime task_update_latency_ns = 0;
  double aicore_gflops = 0;  // per core
  double aicpu_gflops = 0;   // per unit
  int prefetch_num = 0;
  bool task_update_supported = false;
  // Resource limits per device (optional in the JSON; these defaults otherwise). The default
  // stream counts as one stream.
  int max_streams = 1024;
  int max_events = 65536;
  // The device-to-device link between two chips of one host (an HCCS-like link; optional in the
  // JSON): what a copy to a peer device costs (Runtime::MemcpyPeerAsync).
  double link_bandwidth_gbps = 56;
  VTime link_latency_ns = 3000;
  // What a kernel block costs npu_sim on the host that runs the simulation (wall time, not
  // virtual): the source of the threshold that sizes block splits (graph::TileOp). One more part
  // of a kernel costs `block_dispatch_ns` (a stream -> unit message; measured by `npuflow bench
  // npu`, split_kernel_parts_per_s: 2.45 M parts/s is 408 ns); a unit works through memory at
  // `block_host_gbps` and computes at `block_host_gflops` (`npuflow bench ops`: gemv_f32_gbps
  // 9.2, matmul 1-thread 40 GFLOP/s). No kernel is split finer than a block's work paying for
  // its dispatch. Optional in the JSON (these defaults); block_dispatch_ns 0 turns the cap off.
  double block_dispatch_ns = 400;
  double block_host_gbps = 10;
  double block_host_gflops = 40;

  // Virtual time to move `bytes` at `gbps` GB/s, plus the DMA latency.
  VTime CopyCost(std::uint64_t bytes, double gbps) const;
  // Virtual time to move `bytes` to a peer device over the link.
  VTime LinkCost(std::uint64_t bytes) const;
};

// Parses a chip description. Every field is required; a missing, mistyped or out-of-range field
// is a ParamInvalid naming `source` and the field.
StatusOr<ChipSpec> ParseChipSpec(std::string_view json_text, std::string_view source);

// Loads "<name>" from the chips shipped with npuflow (910B, 310P), or a path to a JSON file.
StatusOr<ChipSpec> LoadChipSpec(std::string_view name_or_path);

// The names of the shipped chips.
std::vector<std::string> ShippedChips();

}  // namespace npuflow::npu_sim
