// The data pipelines' portable random stream: Philox blocks, unbiased integers, shuffles.
#include "nn/data/data_rng.h"

#include <numeric>

#include "core/error.h"
#include "core/random.h"

namespace tinyformer::nn::data {

namespace {
// SplitMix64's finaliser: a bijection that scatters nearby inputs (seed, seed + 1) far apart.
std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t stream) {
  return splitmix64(splitmix64(seed) ^ (stream * 0xD1B54A32D192ED03ull + 0x8CB92BA72F3D8DD7ull));
}

std::uint32_t Rng::next_u32() {
  if (used_ == 4) {
    Philox::generate(seed_, counter_++, block_);
    used_ = 0;
  }
  return block_[used_++];
}

double Rng::uniform() {
  const std::uint32_t hi = next_u32();
  const std::uint32_t lo = next_u32();
  return Philox::to_unit(hi, lo);
}

std::int64_t Rng::uniform_int(std::int64_t low, std::int64_t high) {
  TF_CHECK(low <= high, "Rng::uniform_int: expected low <= high, got [", low, ", ", high, "]");
  const std::uint64_t range = static_cast<std::uint64_t>(high - low) + 1;
  TF_CHECK(range <= (1ull << 32), "Rng::uniform_int: the range [", low, ", ", high,
           "] holds more than 2^32 values");
  if (range == (1ull << 32)) return low + static_cast<std::int64_t>(next_u32());
  // Lemire's multiply-and-reject: the high word of x * range is uniform once the few x whose
  // low word falls below 2^32 mod range are redrawn.
  const std::uint32_t r = static_cast<std::uint32_t>(range);
  std::uint64_t m = static_cast<std::uint64_t>(next_u32()) * r;
  std::uint32_t low_word = static_cast<std::uint32_t>(m);
  if (low_word < r) {
    const std::uint32_t threshold = static_cast<std::uint32_t>(-r) % r;
    while (low_word < threshold) {
      m = static_cast<std::uint64_t>(next_u32()) * r;
      low_word = static_cast<std::uint32_t>(m);
    }
  }
  return low + static_cast<std::int64_t>(m >> 32);
}

void shuffle(std::vector<std::int64_t>& values, Rng& rng) {
  for (std::int64_t i = static_cast<std::int64_t>(values.size()) - 1; i > 0; --i) {
    const std::int64_t j = rng.uniform_int(0, i);
    std::swap(values[static_cast<std::size_t>(i)], values[static_cast<std::size_t>(j)]);
  }
}

std::vector<std::int64_t> permutation(std::int64_t n, Rng& rng) {
  TF_CHECK(n >= 0, "permutation: expected a size >= 0, got ", n);
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  shuffle(order, rng);
  return order;
}

}  // namespace tinyformer::nn::data
