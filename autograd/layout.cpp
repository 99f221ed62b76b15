// How a tensor's dims lie in memory (autograd/layout.h).
#include "autograd/layout.h"

#include <algorithm>
#include <numeric>

namespace tinyformer {

std::optional<std::int64_t> collapsed_stride(const Tensor& t, std::int64_t n) {
  std::optional<std::int64_t> inner;  // stride of the innermost dim seen so far
  std::int64_t inner_size = 1;
  std::int64_t result = 0;
  for (std::int64_t d = n - 1; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (!inner) {
      result = t.stride(d);
    } else if (t.stride(d) != *inner * inner_size) {
      return std::nullopt;
    }
    inner = t.stride(d);
    inner_size = t.size(d);
  }
  return result;
}

std::optional<std::vector<std::int64_t>> memory_order(const Tensor& t) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(t.dim()));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int64_t x, std::int64_t y) { return t.stride(x) > t.stride(y); });
  std::int64_t expected = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (t.size(*it) == 1) continue;
    if (t.stride(*it) != expected) return std::nullopt;
    expected *= t.size(*it);
  }
  return order;
}

}  // namespace tinyformer
