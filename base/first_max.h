// The index of the first largest float in a span, as greedy sampling and the ArgMax op define it:
// NaN never compares larger than anything and -inf never wins, so a span holding only -inf and NaN
// (or nothing) has no largest element (-1). Among equal maxima the lowest index wins: the same as a
// running "first strictly larger" scan from the front.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

namespace npuflow {

// One pass over 8 lanes (GCC vector extensions: a compare and two selects per 8 floats); each lane
// keeps its largest value and where it first saw it, then the lanes and the tail are merged.
inline std::int64_t FirstMaxIndex(const float* x, std::size_t n) {
  using Floats = float __attribute__((vector_size(32)));
  constexpr int kLanes = 8;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const std::size_t whole = n / kLanes * kLanes;
  Floats max = {kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf};
  using Masks = std::int32_t __attribute__((vector_size(32)));
  using Index = std::int32_t __attribute__((vector_size(32)));
  // 32-bit lane indices cover 2^31 floats; longer spans take the scalar scan below.
  const bool lanes = n <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max());
  Index at = {}, index = {0, 1, 2, 3, 4, 5, 6, 7};
  const Index step = {kLanes, kLanes, kLanes, kLanes, kLanes, kLanes, kLanes, kLanes};
  std::size_t i = 0;
  if (lanes) {
    for (; i < whole; i += kLanes) {
      Floats v;
      std::memcpy(&v, x + i, sizeof(v));
      const Masks larger = v > max;
      max = larger ? v : max;
      at = larger ? index : at;
      index += step;
    }
  }
  float best_value = kNegInf;
  std::int64_t best = -1;
  if (lanes)
    for (int l = 0; l < kLanes; ++l)
      if (max[l] > best_value || (max[l] == best_value && best >= 0 && at[l] < best)) {
        best_value = max[l];
        best = at[l];
      }
  for (; i < n; ++i)  // later than every lane's index: strictly larger only
    if (x[i] > best_value) {
      best_value = x[i];
      best = static_cast<std::int64_t>(i);
    }
  return best;
}

}  // namespace npuflow
