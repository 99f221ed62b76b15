// The dropout of memory-efficient attention (ops flash_attention and flash_attention_backward,
// core/ops.def): which elements of the [..., n, m] probabilities a draw keeps, decided from each
// element's index so that a kernel draws it again instead of storing a mask. Host and device code.
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "core/random.h"

namespace tinyformer {

// Attention dropout as flash_attention and flash_attention_backward (core/ops.def) draw it: the
// element at index g of a [..., n, m] stream of probabilities is kept where word g % 4 of
// Philox(seed, (offset + g) / 4)... exactly as random(scaled_bernoulli, seed, offset, 1 - p,
// 1 / (1 - p)) decides element g of a [..., n, m] tensor (core/sampling.h), so a kernel redraws
// any element in either direction without storing the mask.
struct AttentionDropout {
  double p = 0.0;          // the probability of dropping; 0: no dropout
  std::uint64_t seed = 0;  // the generator's seed and first counter (Generator::reserve)
  std::uint64_t offset = 0;
  std::uint64_t threshold = 0;  // kept where the word < threshold: (1 - p) 2^32, truncated
  double scale = 1.0;           // what a kept element is multiplied by: 1 / (1 - p), 0 at p = 1

  TF_HOST_DEVICE bool active() const { return p > 0.0; }
  // Whether element g of the stream is kept.
  TF_HOST_DEVICE bool keep(std::uint64_t g) const {
    const std::uint64_t at = offset + g;
    std::uint32_t words[4];
    Philox::generate(seed, at / 4, words);
    return words[at % 4] < threshold;
  }
  // Keeps of elements [g, g + count) into keep[0, count) (1 kept, 0 dropped): one Philox call
  // per four elements.
  TF_HOST_DEVICE void keep_run(std::uint64_t g, std::int64_t count, unsigned char* keep) const {
    std::uint64_t at = offset + g;
    std::int64_t i = 0;
    while (i < count) {
      std::uint32_t words[4];
      Philox::generate(seed, at / 4, words);
      for (std::uint64_t w = at % 4; w < 4 && i < count; ++w, ++i, ++at) {
        keep[i] = words[w] < threshold ? 1 : 0;
      }
    }
  }
};

// The dropout of probability p drawn from counters [offset, ...) under seed (p = 0: none).
inline AttentionDropout attention_dropout(double p, std::uint64_t seed, std::uint64_t offset) {
  AttentionDropout d;
  d.p = p;
  d.seed = seed;
  d.offset = offset;
  // p outside [0, 1] is refused by the ops' checks; the threshold is computed within it.
  const double kept = p < 0.0 ? 1.0 : p > 1.0 ? 0.0 : 1.0 - p;
  d.threshold = static_cast<std::uint64_t>(kept * 4294967296.0);
  d.scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
  return d;
}

}  // namespace tinyformer
