// Deterministic random numbers: a seedable generator whose draws are counter-based (Philox
// 4x32-10), so element i of a draw depends only on (seed, offset + i), never on the device,
// the thread count or how a kernel splits the work.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

#include "core/host_device.h"

namespace tinyformer {

// Philox 4x32 with 10 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3").
// Usable from host and device code alike.

struct Philox {
  // One round on one counter's four words under the key (k0, k1).
  TF_HOST_DEVICE static void round(std::uint32_t& c0, std::uint32_t& c1, std::uint32_t& c2,
                                   std::uint32_t& c3, std::uint32_t k0, std::uint32_t k1) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(0xD2511F53u) * c0;
    const std::uint64_t p1 = static_cast<std::uint64_t>(0xCD9E8D57u) * c2;
    c0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1 ^ k0;
    c2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<std::uint32_t>(p1);
    c3 = static_cast<std::uint32_t>(p0);
  }
  static constexpr std::uint32_t kKeyStep0 = 0x9E3779B9u, kKeyStep1 = 0xBB67AE85u;
  // Four 32-bit random words for counter `counter` under key `seed`.
  TF_HOST_DEVICE static void generate(std::uint64_t seed, std::uint64_t counter,
                                      std::uint32_t (&out)[4]) {
    std::uint32_t c[4] = {static_cast<std::uint32_t>(counter),
                          static_cast<std::uint32_t>(counter >> 32), 0u, 0u};
    std::uint32_t k0 = static_cast<std::uint32_t>(seed),
                  k1 = static_cast<std::uint32_t>(seed >> 32);
    for (int r = 0; r < 10; ++r) {
      round(c[0], c[1], c[2], c[3], k0, k1);
      k0 += kKeyStep0;
      k1 += kKeyStep1;
    }
    for (int i = 0; i < 4; ++i) out[i] = c[i];
  }
  // A double in [0, 1) from two words (53 random bits).
  TF_HOST_DEVICE static double to_unit(std::uint32_t hi, std::uint32_t lo) {
    const std::uint64_t bits = (static_cast<std::uint64_t>(hi) << 21) ^ (lo >> 11);
    return static_cast<double>(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
  }
};

// Holds a seed and an offset; every draw reserves a range of counters and advances the offset.
class Generator {
 public:
  explicit Generator(std::uint64_t seed = 0x5eed) : seed_(seed) {}
  void manual_seed(std::uint64_t seed) {
    std::lock_guard lock(mutex_);
    seed_ = seed;
    offset_ = 0;
  }
  std::uint64_t seed() const { return seed_; }
  std::uint64_t offset() const { return offset_; }
  void set_offset(std::uint64_t offset) {
    std::lock_guard lock(mutex_);
    offset_ = offset;
  }
  // Reserves `count` counters and returns (seed, first counter).
  std::array<std::uint64_t, 2> reserve(std::uint64_t count) {
    std::lock_guard lock(mutex_);
    const std::uint64_t first = offset_;
    offset_ += count;
    return {seed_, first};
  }

 private:
  std::mutex mutex_;
  std::uint64_t seed_;
  std::uint64_t offset_ = 0;
};

// The generator used by randn, rand, dropout and initialisers unless one is passed.
Generator& default_generator();
void manual_seed(std::uint64_t seed);

}  // namespace tinyformer
