// A seeded random stream for data pipelines (masking, shuffling, ListOps trees) that gives the
// same numbers on every compiler, standard library and machine.
#pragma once

#include <cstdint>
#include <vector>

namespace tinyformer::nn::data {

// Combines a seed with a stream number (an epoch, an example index) into a new seed, so that
// independent streams can be derived without storing any generator state: masking example i of
// epoch e draws from Rng(mix_seed(mix_seed(seed, e), i)) and a resumed run redraws it exactly.
std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t stream);

// Philox 4x32-10 (core/random.h) read as a sequential stream. The standard distributions
// (std::uniform_int_distribution, std::shuffle) are implementation-defined, so the draws below
// are written out here instead: same seed, same numbers, everywhere.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : seed_(seed) {}

  std::uint32_t next_u32();
  // Uniform on [0, 1) with 53 random bits.
  double uniform();
  // Uniform integer in [low, high] (inclusive), without modulo bias; needs low <= high and a range
  // of at most 2^32 values.
  std::int64_t uniform_int(std::int64_t low, std::int64_t high);
  bool bernoulli(double p) { return uniform() < p; }

 private:
  std::uint64_t seed_;
  std::uint64_t counter_ = 0;
  std::uint32_t block_[4] = {};
  int used_ = 4;  // words of block_ already handed out
};

// Fisher-Yates shuffle of `values` with `rng` (std::shuffle's order varies between libraries).
void shuffle(std::vector<std::int64_t>& values, Rng& rng);
// 0 .. n-1 in a random order.
std::vector<std::int64_t> permutation(std::int64_t n, Rng& rng);

}  // namespace tinyformer::nn::data
