// Internal to stress/: the run's random numbers. Everything random in a stress run (inputs,
// weights, client actions, churn, faults) comes from one of these, seeded from --seed.
#pragma once

#include <cstdint>

namespace npuflow::stress::detail {

// splitmix64: the same numbers everywhere for a seed.
struct Rng {
  std::uint64_t state;
  std::uint64_t Next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  std::uint64_t Below(std::uint64_t n) { return n == 0 ? 0 : Next() % n; }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  float Between(float lo, float hi) { return lo + static_cast<float>(Uniform()) * (hi - lo); }
};

// An independent stream of the run's seed: `stream` names what it is for, `index` which one.
inline Rng SeededRng(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  Rng r{seed ^ (0xA5A5A5A5ull * (stream + 1)) ^ (0x9E3779B97F4A7C15ull * (index + 1))};
  r.Next();
  return r;
}

}  // namespace npuflow::stress::detail
