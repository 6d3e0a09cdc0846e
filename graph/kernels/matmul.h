// Internal to graph/ (and benchmarks/ops_bench.cc): the cache-blocked, register-tiled f32 GEMM
// behind the MatMul and BatchMatMul device kernels.
//
// Layout (GotoBLAS / BLIS style, plain C++ that GCC auto-vectorizes at -O3 -march=native):
//   the output is cut into tiles of at most kGemmTileM x kGemmTileN; a tile is the unit of work a
//   device block takes. A tile's columns of B are packed into kGemmNR-wide panels, K block by K
//   block (kept in the scratch for the next tile of the same columns); per K block of kGemmKC the
//   tile's rows of A are packed into kGemmMR-tall panels (both zero-padded at the edges,
//   converted to f32 on the way, transposes resolved), then a micro-kernel accumulates
//   kGemmMR x kGemmNR outputs in a local array the compiler keeps in vector registers.
//   Partial sums go to an f32 tile buffer; the tile is written out (with bias, converted to the
//   output dtype) once K is done.
//
// Determinism: every output element is summed in the same order (k blocks of kGemmKC, k ascending
// inside a block) whichever tile, block or block_dim computes it, so the device result does not
// depend on how the work is split.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

#if defined(__F16C__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "graph/ir/half.h"
#include "graph/kernels/gemv_prefetch.h"
#include "graph/kernels/gemv_tuner.h"
#include "graph/ir/types.h"

namespace npuflow::graph {

// Micro-tile: kGemmMR rows x kGemmNR columns of accumulators. With AVX-512 that is 6 x 4 zmm
// registers (24 of 32); with AVX2, 6 x 2 ymm (12 of 16), as in BLIS's haswell kernel.
inline constexpr int kGemmMR = 6;
#if defined(__AVX512F__)
inline constexpr int kGemmNR = 64;
#else
inline constexpr int kGemmNR = 16;
#endif
inline constexpr int kGemmKC = 256;              // K block: a packed B panel (KC x NR) stays in L1/L2
// A tile packs its columns of B (all of K) once and runs every row panel against them, so the rows
// of one tile amortize that packing: 132 rows (a multiple of kGemmMR) hold a 128-token prefill in
// one row tile. With 120 the last 8 rows were a tile of their own that packed the same B columns
// again; at 1 thread, thread CPU time, M = 128, 120 x 256 ran at 0.82-0.93x OpenBLAS and 132 x 128
// at 1.02-1.18x. 128 columns (2 micro-panels) cut GPT-2's widths (768, 2304, 3072) into an even
// number of tiles, so 2 host threads share them evenly.
inline constexpr std::int64_t kGemmTileM = 132;  // a multiple of kGemmMR
inline constexpr std::int64_t kGemmTileN = 128;  // a multiple of kGemmNR
static_assert(kGemmTileM % kGemmMR == 0 && kGemmTileN % kGemmNR == 0);

// A logical [rows, cols] matrix operand: element (r, c) is data[r * ld + c], or data[c * ld + r]
// when `transposed`. dtype: f32, f16 or bf16.
struct GemmMatrix {
  const void* data = nullptr;
  DataType dtype = DataType::kFloat32;
  std::int64_t ld = 0;
  bool transposed = false;
};

// The row-major output: element (r, c) is data[r * ld + c]. dtype: f32, f16 or bf16.
struct GemmOutput {
  void* data = nullptr;
  DataType dtype = DataType::kFloat32;
  std::int64_t ld = 0;
};

// Scratch for the tiles of one [m, n, k] problem that a block runs: the packed A block, the packed
// B column panel of the whole K, and the f32 tile buffer. The packed B panel is kept across
// tiles: a tile with the same B operand and columns as the previous one skips packing it, so run
// the tiles of one column panel back to back. B's bytes must not change while the scratch is used.
class GemmScratch {
 public:
  GemmScratch(std::int64_t m, std::int64_t n, std::int64_t k)
      : rows_(RoundUp(std::clamp<std::int64_t>(m, 1, kGemmTileM), kGemmMR)),
        cols_(RoundUp(std::clamp<std::int64_t>(n, 1, kGemmTileN), kGemmNR)),
        k_(std::max<std::int64_t>(k, 1)),
        a_(new float[static_cast<std::size_t>(rows_ * std::min<std::int64_t>(k_, kGemmKC))]),
        b_(new float[static_cast<std::size_t>(cols_ * k_)]),
        c_(new float[static_cast<std::size_t>(rows_ * cols_)]) {}

  float* a() { return a_.get(); }
  float* b() { return b_.get(); }
  float* c() { return c_.get(); }
  std::int64_t rows() const { return rows_; }  // the most tile rows, columns and K it holds
  std::int64_t cols() const { return cols_; }
  std::int64_t k() const { return k_; }

  // Whether b() holds columns [n0, n1) of `b`, packed.
  bool HoldsB(const void* b, std::int64_t n0, std::int64_t n1) const {
    return b == packed_b_ && n0 == packed_n0_ && n1 == packed_n1_;
  }
  void SetPackedB(const void* b, std::int64_t n0, std::int64_t n1) {
    packed_b_ = b;
    packed_n0_ = n0;
    packed_n1_ = n1;
  }

 private:
  static std::int64_t RoundUp(std::int64_t x, std::int64_t to) { return (x + to - 1) / to * to; }
  std::int64_t rows_, cols_, k_;
  std::unique_ptr<float[]> a_, b_, c_;
  const void* packed_b_ = nullptr;
  std::int64_t packed_n0_ = -1, packed_n1_ = -1;
};

namespace gemm_internal {

inline float LoadAs(const void* p, DataType dtype, std::int64_t i) {
  switch (dtype) {
    case DataType::kFloat16: return HalfToFloat(static_cast<const std::uint16_t*>(p)[i]);
    case DataType::kBFloat16: return BFloat16ToFloat(static_cast<const std::uint16_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

// dst[k * W + w] = M(line0 + w, k0 + k) for w < n (zero beyond), k < kc, where a "line" is a row of
// A (W = MR) or a column of B (W = NR, the operand read with rows and columns swapped).
template <int W, typename Elem>
inline void PackPanel(const Elem* m, DataType dtype, std::int64_t ld, bool lines_contiguous, std::int64_t line0,
                      std::int64_t n, std::int64_t k0, int kc, float* dst) {
  auto load = [&](std::int64_t i) -> float {
    if constexpr (std::is_same_v<Elem, float>) {
      return m[i];
    } else {
      return LoadAs(m, dtype, i);
    }
  };
  if (lines_contiguous) {
    // Line w is contiguous along k: m[(line0 + w) * ld + k0 + k].
    for (std::int64_t w = 0; w < n; ++w) {
      const std::int64_t base = (line0 + w) * ld + k0;
      for (int k = 0; k < kc; ++k) dst[k * W + w] = load(base + k);
    }
  } else {
    // Step k is contiguous along the lines: m[(k0 + k) * ld + line0 + w].
    for (int k = 0; k < kc; ++k) {
      const std::int64_t base = (k0 + k) * ld + line0;
      for (std::int64_t w = 0; w < n; ++w) dst[k * W + w] = load(base + w);
    }
  }
  for (std::int64_t w = n; w < W; ++w)
    for (int k = 0; k < kc; ++k) dst[k * W + w] = 0.f;
}

template <int W>
inline void Pack(const void* m, DataType dtype, std::int64_t ld, bool lines_contiguous, std::int64_t line0,
                 std::int64_t n, std::int64_t k0, int kc, float* dst) {
  if (dtype == DataType::kFloat32)
    PackPanel<W>(static_cast<const float*>(m), dtype, ld, lines_contiguous, line0, n, k0, kc, dst);
  else
    PackPanel<W>(static_cast<const std::uint16_t*>(m), dtype, ld, lines_contiguous, line0, n, k0, kc, dst);
}

// c[i * ldc + j] (+)= sum_k a[k * MR + i] * b[k * NR + j] for the whole micro-tile.
template <bool kAccumulate>
[[gnu::noinline]] void MicroKernel(int kc, const float* __restrict a, const float* __restrict b, float* __restrict c,
                                   std::int64_t ldc) {
  float acc[kGemmMR][kGemmNR] = {};
  for (int k = 0; k < kc; ++k) {
    const float* bk = b + k * kGemmNR;
    const float* ak = a + k * kGemmMR;
#pragma GCC unroll 8
    for (int i = 0; i < kGemmMR; ++i) {
      const float av = ak[i];
#pragma GCC unroll 4
      for (int j = 0; j < kGemmNR; ++j) acc[i][j] += av * bk[j];
    }
  }
  for (int i = 0; i < kGemmMR; ++i) {
    float* ci = c + i * ldc;
    if constexpr (kAccumulate) {
      for (int j = 0; j < kGemmNR; ++j) ci[j] += acc[i][j];
    } else {
      for (int j = 0; j < kGemmNR; ++j) ci[j] = acc[i][j];
    }
  }
}

}  // namespace gemm_internal

// C[m0:m1, n0:n1] = A[m0:m1, 0:k] * B[0:k, n0:n1] (+ bias[n0:n1] when bias is not null) for one
// tile: 0 < m1 - m0 <= scratch.rows(), 0 < n1 - n0 <= scratch.cols() (at most kGemmTileM x
// kGemmTileN) and k <= scratch.k(). k == 0 gives the bias (or 0).
inline void GemmTile(const GemmMatrix& a, const GemmMatrix& b, const float* bias, const GemmOutput& c, std::int64_t k,
                     std::int64_t m0, std::int64_t m1, std::int64_t n0, std::int64_t n1, GemmScratch& scratch) {
  using gemm_internal::MicroKernel;
  using gemm_internal::Pack;
  const std::int64_t tm = m1 - m0, tn = n1 - n0;
  const std::int64_t m_panels = (tm + kGemmMR - 1) / kGemmMR, n_panels = (tn + kGemmNR - 1) / kGemmNR;
  const std::int64_t ldt = scratch.cols();  // the f32 tile buffer's row stride
  float* ct = scratch.c();
  if (k == 0)
    for (std::int64_t i = 0; i < tm; ++i) std::fill_n(ct + i * ldt, tn, 0.f);
  // The B column panel, every K block: block k0 at b() + k0 * cols(), as n_panels micro-panels of
  // kc x kGemmNR. B(kk, col) is read as line `col` of B^T: contiguous along k when B is stored
  // transposed.
  if (!scratch.HoldsB(b.data, n0, n1)) {
    for (std::int64_t k0 = 0; k0 < k; k0 += kGemmKC) {
      const int kc = static_cast<int>(std::min<std::int64_t>(kGemmKC, k - k0));
      for (std::int64_t q = 0; q < n_panels; ++q) {
        const std::int64_t col = n0 + q * kGemmNR;
        Pack<kGemmNR>(b.data, b.dtype, b.ld, b.transposed, col, std::min<std::int64_t>(kGemmNR, n1 - col), k0, kc,
                      scratch.b() + k0 * scratch.cols() + q * kc * kGemmNR);
      }
    }
    scratch.SetPackedB(b.data, n0, n1);
  }
  for (std::int64_t k0 = 0; k0 < k; k0 += kGemmKC) {
    const int kc = static_cast<int>(std::min<std::int64_t>(kGemmKC, k - k0));
    const float* bk = scratch.b() + k0 * scratch.cols();
    for (std::int64_t p = 0; p < m_panels; ++p) {
      const std::int64_t row = m0 + p * kGemmMR;
      Pack<kGemmMR>(a.data, a.dtype, a.ld, !a.transposed, row, std::min<std::int64_t>(kGemmMR, m1 - row), k0, kc,
                    scratch.a() + p * kc * kGemmMR);
    }
    // The tile buffer has whole micro-tiles (padding rows and columns are computed, never stored).
    auto* micro = k0 > 0 ? &MicroKernel<true> : &MicroKernel<false>;
    for (std::int64_t q = 0; q < n_panels; ++q)
      for (std::int64_t p = 0; p < m_panels; ++p)
        micro(kc, scratch.a() + p * kc * kGemmMR, bk + q * kc * kGemmNR, ct + p * kGemmMR * ldt + q * kGemmNR, ldt);
  }
  for (std::int64_t i = 0; i < tm; ++i) {
    const float* src = ct + i * ldt;
    const std::int64_t out = (m0 + i) * c.ld + n0;
    switch (c.dtype) {
      case DataType::kFloat16: {
        auto* dst = static_cast<std::uint16_t*>(c.data) + out;
        for (std::int64_t j = 0; j < tn; ++j) dst[j] = FloatToHalf(bias ? src[j] + bias[n0 + j] : src[j]);
        break;
      }
      case DataType::kBFloat16: {
        auto* dst = static_cast<std::uint16_t*>(c.data) + out;
        for (std::int64_t j = 0; j < tn; ++j) dst[j] = FloatToBFloat16(bias ? src[j] + bias[n0 + j] : src[j]);
        break;
      }
      default: {
        float* dst = static_cast<float*>(c.data) + out;
        if (bias) {
          for (std::int64_t j = 0; j < tn; ++j) dst[j] = src[j] + bias[n0 + j];
        } else {
          std::memcpy(dst, src, static_cast<std::size_t>(tn) * sizeof(float));
        }
      }
    }
  }
}

// ---- GEMV: one row of A (M = 1), the decode-step shape --------------------------------------------
// Packing B would copy the whole weight matrix for one output row, so M = 1 takes its own path:
// each output is one dot product (B stored transposed, [N][K]) or one column sum (B [K][N]) over
// k ascending, in a fixed order, so any split of the columns gives the same bits. The loops are
// memory-bound on B: 32 independent f32 accumulators (4 x 8 in ymm registers with AVX2 and FMA,
// plain loops GCC vectorizes otherwise), f16 converted in registers (F16C; 4 x 16 zmm lanes with
// AVX-512), lanes summed pairwise.
//
// The weights are read once per step and never again before the next one, so the GEMV prefetches
// them ahead as non-temporal (prefetchnta): they pass through L1 without evicting what the rest of
// the step keeps in L2 and L3 (activations, the KV cache, the runtime's own state). Measured on
// GPT-2 117M decode at 1 thread, alternating runs: f32 46-52 -> 60-70 tokens/s, f16 80-110 ->
// 115-125; a T0 prefetch at the same distance gained a few percent only. How far ahead: see
// graph/kernels/gemv_prefetch.h (the MatMul's stream_weights picks the lead). Whether to prefetch
// at all is measured as the GEMV runs (GemvReadTuner, graph/kernels/gemv_tuner.h): on some hours of
// this shared machine a plain read of cached weights runs 15-30% faster than any prefetch.

// Output columns per device block the GEMV's tiling aims for (graph/ops/nn.cc): 768 KiB of f16
// or 1.5 MiB of f32 weights at K = 768.
inline constexpr std::int64_t kGemvBlockColumns = 512;

namespace gemm_internal {

inline constexpr int kGemvLanes = 32;

// Pairwise, in a fixed order (the same bits for every row and split): short dependency chains,
// so the sum of one row overlaps the loads of the next.
inline float ReduceLanes(float* acc) {
#pragma GCC unroll 8
  for (int width = kGemvLanes / 2; width >= 1; width /= 2)
#pragma GCC unroll 16
    for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
  return acc[0];
}

#if defined(__F16C__) && defined(__AVX2__) && defined(__FMA__)
// 8 f16 -> 8 f32.
[[gnu::always_inline]] inline __m256 HalvesToFloats8(const std::uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// The 8 lanes of one ymm register, summed pairwise.
inline float Sum8(__m256 s) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// The 32 lanes as 4 x 8 in ymm registers, summed pairwise in registers.
inline float SumLanes(const __m256 (&v)[4]) {
  return Sum8(_mm256_add_ps(_mm256_add_ps(v[0], v[1]), _mm256_add_ps(v[2], v[3])));
}
#endif

// A non-temporal prefetch of the two cache lines `bytes` past p, when Stream (the weights of a
// GEMV); nothing otherwise (Attention's keys, which the next step reads again).
template <bool Stream>
[[gnu::always_inline]] inline void PrefetchWeights(const void* p, std::size_t bytes) {
  if constexpr (Stream) {
    __builtin_prefetch(static_cast<const char*>(p) + bytes, 0, 0);
    __builtin_prefetch(static_cast<const char*>(p) + bytes + 64, 0, 0);
  }
}

// `lead`: the prefetch distance in bytes, when Stream.
template <bool Stream = false>
[[gnu::always_inline]] inline float DotF32(const float* __restrict a, const float* __restrict w, std::int64_t k,
                                           std::size_t lead = kGemvPrefetchBytes) {
  std::int64_t i = 0;
#if defined(__F16C__) && defined(__AVX2__) && defined(__FMA__)
  __m256 v[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (; i + kGemvLanes <= k; i += kGemvLanes) {
    PrefetchWeights<Stream>(w + i, lead);
    for (int l = 0; l < 4; ++l)
      v[l] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8 * l), _mm256_loadu_ps(w + i + 8 * l), v[l]);
  }
  float sum = SumLanes(v);
#else
  float acc[kGemvLanes] = {};
  for (; i + kGemvLanes <= k; i += kGemvLanes) {
    PrefetchWeights<Stream>(w + i, lead);
    for (int l = 0; l < kGemvLanes; ++l) acc[l] += a[i + l] * w[i + l];
  }
  float sum = ReduceLanes(acc);
#endif
  for (; i < k; ++i) sum += a[i] * w[i];
  return sum;
}

// Weight rows up to this long (and a multiple of kGemvLanes) go two at a time (GemvRowsF32).
inline constexpr std::int64_t kGemvPairRowsMaxK = 128;

// c[j] = a . w[j] for j in [j0, j1), rows ld floats apart: each row as DotF32<Prefetch> sums it.
// Short rows (K <= kGemvPairRowsMaxK) go two at a time, each in its own accumulators and in
// DotF32's order, so the bits are the same: one row of 64 floats is two iterations, and the loop's
// own cost (the row's setup and horizontal sum) then bounds it, where two rows overlap theirs. On
// 2 x 64's logits (K = 64, 12.8 MB cached), GPT-2 decode at 1 worker, builds alternated run by run
// 2026-11-29 ~14:50: kernel us a step 259 -> 242, the step 297 -> 278 (8 of 8 pairs faster;
// benchmarks/results/2026-11-29-issue21-gemv-pair-rows-steps.txt); a plain loop over the matrix
// 182 -> 155 us (medians of 7 rounds). At K = 256 and 768 pairs read slower (71 and 57
// GB/s against 77 and 70 one row at a time), hence the bound.
template <bool Prefetch>
inline void GemvRowsF32(const float* __restrict a, const float* w, std::int64_t ld, std::int64_t k, std::int64_t j0,
                        std::int64_t j1, std::size_t lead, float* c) {
  std::int64_t j = j0;
#if defined(__F16C__) && defined(__AVX2__) && defined(__FMA__)
  if (k <= kGemvPairRowsMaxK && k % kGemvLanes == 0) {
    for (; j + 2 <= j1; j += 2) {
      const float* r0 = w + j * ld;
      const float* r1 = r0 + ld;
      __m256 v[4], u[4];
      for (int l = 0; l < 4; ++l) v[l] = u[l] = _mm256_setzero_ps();
      for (std::int64_t i = 0; i < k; i += kGemvLanes) {
        PrefetchWeights<Prefetch>(r0 + i, lead);
        PrefetchWeights<Prefetch>(r1 + i, lead);
        for (int l = 0; l < 4; ++l) {
          const __m256 x = _mm256_loadu_ps(a + i + 8 * l);
          v[l] = _mm256_fmadd_ps(x, _mm256_loadu_ps(r0 + i + 8 * l), v[l]);
          u[l] = _mm256_fmadd_ps(x, _mm256_loadu_ps(r1 + i + 8 * l), u[l]);
        }
      }
      c[j] = SumLanes(v);
      c[j + 1] = SumLanes(u);
    }
  }
#endif
  for (; j < j1; ++j) c[j] = DotF32<Prefetch>(a, w + j * ld, k, lead);
}

#if defined(__AVX512F__)
// 16 f16 -> 16 f32. The zero-masked forms here and below compute the same as the plain
// intrinsics, which GCC 12's own headers build from an uninitialized register
// (-Wmaybe-uninitialized inside avx512fintrin.h).
[[gnu::always_inline]] inline __m512 HalvesToFloats(const std::uint16_t* p) {
  return _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
#endif

// Always a GEMV's weights: prefetched as a stream. With AVX-512, 64 lanes as 4 x 16: the
// accumulators of a zmm loop. Two loops keep them, for where the weights are (the lead says which,
// GemvLeadStreams): weights that may be cached convert 16 weights at a time in zmm registers (1.2-1.4x
// the 8-wide loop's GB/s when measured, 2026-11-22, with the long lead everywhere); weights that
// stream from memory convert 8 at a time, each zmm accumulator held as two ymm halves, which at the
// short lead read faster on this VM's AMD EPYC (K = 768 over 192 MiB, 2026-11-29: 28-31 GB/s
// against 20-23 for the zmm loop; 12 MiB cached at the long lead: zmm 45-46, the halves 39-41).
// Both add the same products in the same order, so they give the same bits: which one runs is a
// speed choice only. Without AVX-512, 32 lanes as 4 x 8 in ymm registers (other bits).
// Prefetch false: no software prefetch (GemvReadTuner), the same arithmetic.
template <bool Prefetch = true>
[[gnu::always_inline]] inline float DotF16(const float* __restrict a, const std::uint16_t* __restrict w, std::int64_t k,
                                           std::size_t lead) {
  std::int64_t i = 0;
#if defined(__AVX512F__) && defined(__F16C__) && defined(__AVX2__) && defined(__FMA__)
  float sum;
  if (!GemvLeadStreams(lead)) {
    __m512 v[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (; i + 64 <= k; i += 64) {
      PrefetchWeights<Prefetch>(w + i, lead);
      for (int l = 0; l < 4; ++l) {
        const __m512 wf = HalvesToFloats(w + i + 16 * l);
        v[l] = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16 * l), wf, v[l]);
      }
    }
    for (; i + 16 <= k; i += 16) {
      const __m512 wf = HalvesToFloats(w + i);
      v[0] = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), wf, v[0]);
    }
    const __m512 s16 = _mm512_add_ps(_mm512_add_ps(v[0], v[1]), _mm512_add_ps(v[2], v[3]));
    sum = Sum8(_mm256_add_ps(_mm512_maskz_extractf32x8_ps(0xFF, s16, 0), _mm512_extractf32x8_ps(s16, 1)));
  } else {
    // lo[l] / hi[l]: lanes 0-7 / 8-15 of the zmm loop's v[l].
    __m256 lo[4], hi[4];
    for (int l = 0; l < 4; ++l) lo[l] = hi[l] = _mm256_setzero_ps();
    for (; i + 64 <= k; i += 64) {
      PrefetchWeights<Prefetch>(w + i, lead);
      for (int l = 0; l < 4; ++l) {
        const std::int64_t at = i + 16 * l;
        lo[l] = _mm256_fmadd_ps(_mm256_loadu_ps(a + at), HalvesToFloats8(w + at), lo[l]);
        hi[l] = _mm256_fmadd_ps(_mm256_loadu_ps(a + at + 8), HalvesToFloats8(w + at + 8), hi[l]);
      }
    }
    for (; i + 16 <= k; i += 16) {
      lo[0] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), HalvesToFloats8(w + i), lo[0]);
      hi[0] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), HalvesToFloats8(w + i + 8), hi[0]);
    }
    const __m256 sl = _mm256_add_ps(_mm256_add_ps(lo[0], lo[1]), _mm256_add_ps(lo[2], lo[3]));
    const __m256 sh = _mm256_add_ps(_mm256_add_ps(hi[0], hi[1]), _mm256_add_ps(hi[2], hi[3]));
    sum = Sum8(_mm256_add_ps(sl, sh));
  }
#elif defined(__F16C__) && defined(__AVX2__) && defined(__FMA__)
  __m256 v[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (; i + kGemvLanes <= k; i += kGemvLanes) {
    PrefetchWeights<Prefetch>(w + i, lead);
    for (int l = 0; l < 4; ++l) {
      v[l] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8 * l), HalvesToFloats8(w + i + 8 * l), v[l]);
    }
  }
  float sum = SumLanes(v);
#else
  float acc[kGemvLanes] = {};
  for (; i + kGemvLanes <= k; i += kGemvLanes) {
    PrefetchWeights<Prefetch>(w + i, lead);
    for (int l = 0; l < kGemvLanes; ++l) acc[l] += a[i + l] * HalfToFloat(w[i + l]);
  }
  float sum = ReduceLanes(acc);
#endif
  for (; i < k; ++i) sum += a[i] * HalfToFloat(w[i]);
  return sum;
}

}  // namespace gemm_internal

// c[j] = sum_k a[k] * B(k, j) (+ bias[j]) for j in [j0, j1): a is f32[k], c f32; B f32, f16 or
// bf16, stored [N][K] when b.transposed (the Linear layout), else [K][N]. `lead`: the prefetch
// distance in bytes (GemvPrefetchLead; for f16 weights it also picks DotF16's loop, the same bits
// either way).
inline void Gemv(const float* a, const GemmMatrix& b, const float* bias, float* c, std::int64_t k, std::int64_t j0,
                 std::int64_t j1, std::size_t lead) {
  using namespace gemm_internal;
  if (b.transposed && (b.dtype == DataType::kFloat32 || b.dtype == DataType::kFloat16)) {
    // Rows of B are the weights of one output each; whether to prefetch them is measured as it
    // runs (GemvReadTuner), per unit thread and weight matrix.
    const bool f16 = b.dtype == DataType::kFloat16;
    GemvReadTuner& tuner = GemvReadTuner::ForThisThread(b.data, GemvLeadStreams(lead));
    const GemvReadTuner::Way way = tuner.Next();
    const std::uint64_t t0 = GemvReadTuner::Now();
    if (f16) {
      const auto* w = static_cast<const std::uint16_t*>(b.data);
      if (way == GemvReadTuner::kPrefetch) {
        for (std::int64_t j = j0; j < j1; ++j) c[j] = DotF16<true>(a, w + j * b.ld, k, lead);
      } else {
        for (std::int64_t j = j0; j < j1; ++j) c[j] = DotF16<false>(a, w + j * b.ld, k, lead);
      }
    } else {
      const auto* w = static_cast<const float*>(b.data);
      if (way == GemvReadTuner::kPrefetch) GemvRowsF32<true>(a, w, b.ld, k, j0, j1, lead, c);
      else GemvRowsF32<false>(a, w, b.ld, k, j0, j1, lead, c);
    }
    tuner.Record(way, GemvReadTuner::Now() - t0,
                 static_cast<std::uint64_t>(j1 - j0) * static_cast<std::uint64_t>(k) * (f16 ? 2u : 4u));
    if (bias)
      for (std::int64_t j = j0; j < j1; ++j) c[j] += bias[j];
    return;
  }
  if (b.transposed) {  // bf16
    for (std::int64_t j = j0; j < j1; ++j) {
      float s = 0.f;
      const auto* w = static_cast<const std::uint16_t*>(b.data) + j * b.ld;
      for (std::int64_t i = 0; i < k; ++i) s += a[i] * BFloat16ToFloat(w[i]);
      c[j] = bias ? s + bias[j] : s;
    }
    return;
  }
  // B [K][N]: accumulate rows of B into the outputs, k ascending.
  for (std::int64_t j = j0; j < j1; ++j) c[j] = 0.f;
  for (std::int64_t i = 0; i < k; ++i) {
    const float ai = a[i];
    if (b.dtype == DataType::kFloat32) {
      const float* w = static_cast<const float*>(b.data) + i * b.ld;
      for (std::int64_t j = j0; j < j1; ++j) c[j] += ai * w[j];
    } else {
      for (std::int64_t j = j0; j < j1; ++j) c[j] += ai * LoadAs(b.data, b.dtype, i * b.ld + j);
    }
  }
  if (bias)
    for (std::int64_t j = j0; j < j1; ++j) c[j] += bias[j];
}

}  // namespace npuflow::graph
