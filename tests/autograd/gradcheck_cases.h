// Shared helpers of the gradient-check suites: random float64 leaves, and the four layouts
// (contiguous, transposed, sliced, broadcast) in which an op sees its inputs.
#pragma once

#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/random.h"

namespace tinyformer::testing {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// How a leaf reaches the op: as itself, as the transpose of a leaf with its last two dims
// swapped, as every other column of a wider leaf (strided, with an offset), or expanded from a
// leaf whose first dim is 1 (stride 0).
enum class Layout { contiguous, transposed, sliced, broadcast };

inline const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::contiguous:
      return "contiguous";
    case Layout::transposed:
      return "transposed";
    case Layout::sliced:
      return "sliced";
    case Layout::broadcast:
      return "broadcast";
  }
  return "?";
}

inline const std::vector<Layout>& all_layouts() {
  static const std::vector<Layout> layouts = {Layout::contiguous, Layout::transposed,
                                              Layout::sliced, Layout::broadcast};
  return layouts;
}

// The values a leaf is drawn from: any real, or positive (for log, sqrt, division...).
enum class Domain { any, positive };

// The leaf's shape for an op input of `shape` in `layout`.
inline Shape leaf_shape(const Shape& shape, Layout layout) {
  Shape s = shape;
  if (s.empty()) return s;
  switch (layout) {
    case Layout::contiguous:
      break;
    case Layout::transposed:
      if (s.size() >= 2) std::swap(s[s.size() - 1], s[s.size() - 2]);
      break;
    case Layout::sliced:
      s.back() = 2 * s.back() + 1;
      break;
    case Layout::broadcast:
      s[0] = 1;
      break;
  }
  return s;
}

// The op's input of `shape`, made from `leaf` inside the function under test.
inline Tensor present(const Tensor& leaf, const Shape& shape, Layout layout) {
  if (shape.empty()) return leaf;
  switch (layout) {
    case Layout::contiguous:
      return leaf;
    case Layout::transposed:
      return shape.size() >= 2 ? leaf.transpose(-1, -2) : leaf;
    case Layout::sliced:
      return leaf.slice(-1, 1, 2 * shape.back() + 1, 2);
    case Layout::broadcast:
      return leaf.expand(shape);
  }
  return leaf;
}

// A float64 leaf that requires grad, with values from `domain` (seeded, so runs repeat).
inline Tensor make_leaf(const Shape& shape, Domain domain) {
  Tensor t = domain == Domain::positive ? rand(shape, {.dtype = kFloat64}) * 1.5 + 0.5
                                        : randn(shape, {.dtype = kFloat64});
  t = t.detach();
  t.requires_grad_(true);
  return t;
}

// gradcheck as a check: a mismatch fails it with gradcheck's message (input, element, both
// values) and the name of the case, and the test case goes on to the next check.
inline void expect_gradcheck(const Fn& f, const std::vector<Tensor>& inputs,
                             const std::string& what, const GradcheckOptions& options = {}) {
  INFO(what);
  CHECK(gradcheck(f, inputs, options));
}

// gradcheck of `op` on inputs of `shapes`, each presented in `layout`.
inline void check_layout(const std::string& name, const Fn& op, const std::vector<Shape>& shapes,
                         Layout layout, Domain domain = Domain::any,
                         const GradcheckOptions& options = {}) {
  manual_seed(42);
  std::vector<Tensor> leaves;
  for (const Shape& s : shapes) leaves.push_back(make_leaf(leaf_shape(s, layout), domain));
  Fn f = [op, shapes, layout](const std::vector<Tensor>& in) {
    std::vector<Tensor> args;
    for (std::size_t i = 0; i < in.size(); ++i) args.push_back(present(in[i], shapes[i], layout));
    return op(args);
  };
  expect_gradcheck(f, leaves, name + " (" + layout_name(layout) + ")", options);
}

// The same in every layout.
inline void check_all_layouts(const std::string& name, const Fn& op,
                              const std::vector<Shape>& shapes, Domain domain = Domain::any,
                              const GradcheckOptions& options = {}) {
  for (Layout layout : all_layouts()) check_layout(name, op, shapes, layout, domain, options);
}

}  // namespace tinyformer::testing
