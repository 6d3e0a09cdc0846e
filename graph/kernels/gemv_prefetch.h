// Which MatMuls run as a GEMV, how far ahead a GEMV prefetches its weights (graph/kernels/matmul.h),
// and when the compiler marks a MatMul's weights as streaming from memory
// (lowering/stream_weights.cc). Whether a GEMV prefetches at all is measured as it runs
// (GemvReadTuner, gemv_tuner.h): the lead below is the one it uses when it does.
//
// It depends on where the weights can be. Weights that may still sit in the last-level cache from
// the execution before get a long lead (kGemvPrefetchBytes): the hardware prefetchers do not run far
// ahead of L3 hits by themselves. Weights that cannot stay cached stream from memory, where a long
// non-temporal software lead works against the hardware's own stream prefetcher (the lines land in
// L1 only, so the L2 prefetcher is not trained): a short lead (kGemvStreamPrefetchBytes) leaves the
// streaming to the hardware and only covers the next lines.
//
// Measured 2026-11-29 on the GPT-2 decode step, 1 thread, greedy, builds alternated, kernel us a
// step (means of 3): 4 x 256 f32 (64 MB of weights) 6,907 with a 4096-byte lead everywhere
// against 5,447 with 256 (1,024: 6,269; T0 at 1,024: 6,134); 2 x 64 f32 (13 MB) the other way,
// 780 with 4096 against 1,357 with 256; GPT-2 117M f16 (250 MB) within the noise of both. What
// decides is the execution's weights in all, not one matrix: 4 x 256's 1 MB layer matrices stream
// too, flushed by the 51 MB logits: a per-matrix rule gained 13% over the 4 KiB lead, this one 25%
// (4 x 256 decode tok/s, three alternated rounds each).
#pragma once

#include <cstddef>
#include <cstdint>

#include "graph/ir/types.h"

namespace npuflow::graph {

// The GEMV path: one f32 row of a (every output dimension but the last is 1), static shapes.
// TileMatMul (graph/ops/nn.cc) splits such a MatMul by output columns and the stream-weights pass
// counts its b, both by this rule; the kernel (graph/kernels/nn.cc, IsGemv) runs it through Gemv
// by the same condition seen from its GEMM problem (batch 1, M 1, f32 in and out).
inline bool RunsAsGemv(const Shape& out, DataType a_dtype) {
  if (a_dtype != DataType::kFloat32 || !out.is_static() || out.rank() < 1) return false;
  std::int64_t rows = 1;
  for (std::size_t i = 0; i + 1 < out.rank(); ++i) rows *= out.dim(i).size;
  return rows == 1;
}

// The lead for weights that may be cached (2048 measured about the same as 4096).
inline constexpr std::size_t kGemvPrefetchBytes = 4096;
// The lead for weights that stream from memory (128 and 256 measured alike, 1024 between).
inline constexpr std::size_t kGemvStreamPrefetchBytes = 256;
// GEMV weights of one execution above this many bytes in all are taken to stream from memory. A
// cut between the two models measured (13 MB ran faster with the long lead, 64 MB with the short
// one), not a measured cache size: a plain re-read of 13 MB already ran near memory speed on this
// VM, yet the 13 MB model's GEMVs gained from the long lead.
inline constexpr std::size_t kGemvCachedWeightBytes = std::size_t{16} << 20;

constexpr std::size_t GemvPrefetchLead(bool stream) {
  return stream ? kGemvStreamPrefetchBytes : kGemvPrefetchBytes;
}

// Whether a lead is the one for weights that stream from memory (the f16 GEMV also picks its loop
// by it, matmul.h: a speed choice, the bits are the same).
static_assert(kGemvStreamPrefetchBytes < kGemvPrefetchBytes);
constexpr bool GemvLeadStreams(std::size_t lead) { return lead < kGemvPrefetchBytes; }

}  // namespace npuflow::graph
