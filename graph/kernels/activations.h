// Internal to graph/kernels: the activation functions device kernels share, scalar and branch-free
// so the loops around them vectorize. The elementwise kernels (op.Tanh, op.Gelu) and the MatMul
// epilogue (a fused Gelu, lowering's fuse-epilogues pass) call the same functions, so a fused
// kernel gives the bits the unfused pair gave.
#pragma once

#include <cstdint>
#include <cstring>

namespace npuflow::graph {

// e^x for x in [-87, 88] (clamped), to ~2 ulp: Cephes' expf, branch-free so loops vectorize.
[[gnu::always_inline]] inline float ExpF(float x) {
  x = x < -87.f ? -87.f : x;
  x = x > 88.f ? 88.f : x;
  constexpr float kMagic = 12582912.f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = x * 1.44269504088896341f + kMagic;
  std::int32_t n;
  std::memcpy(&n, &t, sizeof(n));
  n -= 0x4B400000;  // the bits of kMagic
  const float fn = t - kMagic;
  const float r = (x - fn * 0.693359375f) + fn * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.f;
  const std::int32_t bits = (n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return y * scale;
}

// tanh(x) to a few ulp: an odd polynomial near 0 (Cephes' tanhf), 1 - 2 / (e^2|x| + 1) beyond.
[[gnu::always_inline]] inline float TanhF(float x) {
  const float ax = x < 0 ? -x : x;
  const float z = x * x;
  const float small =
      ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z + 1.33314422036e-1f) * z -
       3.33332819422e-1f) * z * x + x;
  const float big_abs = 1.f - 2.f / (ExpF(2.f * (ax < 10.f ? ax : 10.f)) + 1.f);
  const float big = x < 0 ? -big_abs : big_abs;
  const float r = ax < 0.625f ? small : big;
  return x == x ? r : x;  // NaN stays NaN
}

// GPT-2's GELU, the tanh approximation.
inline constexpr double kGeluFlops = 25;
[[gnu::always_inline]] inline float GeluF(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * x * (1.f + TanhF(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

}  // namespace npuflow::graph
