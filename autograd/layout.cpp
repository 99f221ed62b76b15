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

// `t` in `dtype`. A t whose elements fill a dense block in some dim order (a transposed or
// permuted view of a contiguous tensor: P^T for dV = P^T dO, g^T for dW = g^T x) is converted
// in memory order and keeps its strides, so the rounding streams through memory instead of
// transposing; anything else becomes contiguous.
Tensor converted_in_memory_order(const Tensor& t, DType dtype) {
  const std::optional<std::vector<std::int64_t>> order = memory_order(t);
  if (!order) return raw::contiguous(raw::to_dtype(t, dtype));
  Shape memory_shape;
  for (std::int64_t d : *order) memory_shape.push_back(t.size(d));
  const Shape memory_strides = contiguous_strides(memory_shape);
  const Tensor converted = raw::to_dtype(
      raw::as_strided(t, memory_shape, memory_strides, t.offset()), dtype);  // dense: a stream
  Shape strides(t.shape().size());
  for (std::size_t i = 0; i < order->size(); ++i) {
    strides[static_cast<std::size_t>((*order)[i])] = memory_strides[i];
  }
  return raw::as_strided(converted, t.shape(), strides, converted.offset());
}

// memory_order (autograd/layout.h) for a t of at least 2 dims whose last dim is innermost.
std::optional<std::vector<std::int64_t>> dense_order(const Tensor& t) {
  if (!t.defined() || t.dim() < 2) return std::nullopt;
  auto order = memory_order(t);
  if (order && t.size(-1) > 1 && order->back() != t.dim() - 1) return std::nullopt;
  return order;
}

// An uninitialised tensor of `shape` whose dims lie in memory in `order` (outermost first).
Tensor empty_in_order(const Shape& shape, const std::vector<std::int64_t>& order,
                      const TensorOptions& options) {
  Shape permuted;
  for (std::int64_t d : order) permuted.push_back(shape[static_cast<std::size_t>(d)]);
  const Shape permuted_strides = contiguous_strides(permuted);
  Shape strides(shape.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    strides[static_cast<std::size_t>(order[i])] = permuted_strides[i];
  }
  const Tensor storage = empty(permuted, options);
  return raw::as_strided(storage, shape, strides, storage.offset());
}

}  // namespace tinyformer
