// Counter-based random numbers for the kernels' random ops (dropout's bernoulli_): element i
// of a node's draw is a pure function of (the node's key, i), Philox4x32-10 (Salmon et al.,
// "Parallel random numbers: as easy as 1, 2, 3", SC'11; the generator cuRAND and PyTorch's
// CUDA random ops use). So a mask is reproducible from a seed, independent of the thread
// count, of the order nodes run in, and of the backend; and two ranks or two steps with
// different keys draw independent masks. Header-only; host and device code.
//
//   const uint64_t key = RandomKey(run_seed, "bernoulli_");  // per node
//   float u = RandomUniform01(key, i);                        // element i, in [0, 1)
#ifndef OVERLAP_RUNTIME_CORE_RANDOM_H_
#define OVERLAP_RUNTIME_CORE_RANDOM_H_

#include <array>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace overlap {

// Philox4x32-10: four 32-bit outputs of the 128-bit `counter` under the 64-bit `key`. O(1).
inline std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> ctr,
                                          std::array<uint32_t, 2> key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // the round multipliers
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // the key schedule's Weyl steps
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr[2];
    ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(p0)};
    key[0] += kW0;
    key[1] += kW1;
  }
  return ctr;
}

// SplitMix64's finaliser: a bijective mix of 64 bits, for combining seeds. O(1).
inline uint64_t MixBits(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The key of a stream named `name` under `seed` (a node's draw: its name, stable across a
// graph's JSON round trip; a rank's and a step's seeds: RandomSeed). O(|name|).
inline uint64_t RandomKey(uint64_t seed, absl::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a, then mixed with the seed
  for (char ch : name) {
    h ^= static_cast<unsigned char>(ch);
    h *= 0x100000001B3ull;
  }
  return MixBits(seed ^ MixBits(h));
}

// A run's seed from the user's seed, the rank and the step: distinct ranks and steps draw
// independent masks (a rank's own generator, as each torch process has one). O(1).
inline uint64_t RandomSeed(uint64_t seed, int64_t rank, int64_t step) {
  return MixBits(MixBits(seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(rank + 1)) ^
                 static_cast<uint64_t>(step));
}

// Element i's uniform draw in [0, 1) with 24 random bits (a float32's mantissa, exact in
// float and double). Lanes of one Philox block serve four consecutive elements. O(1).
inline float RandomUniform01(uint64_t key, uint64_t i) {
  const std::array<uint32_t, 4> r =
      Philox4x32({static_cast<uint32_t>(i >> 2), static_cast<uint32_t>(i >> 34), 0, 0},
                 {static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)});
  return static_cast<float>(r[i & 3] >> 8) * (1.0f / 16777216.0f);
}

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CORE_RANDOM_H_
