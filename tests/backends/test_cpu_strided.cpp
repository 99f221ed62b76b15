// The CPU backend's strided walk (backends/cpu/strided.h): for_each_row visits every element of
// any row-major range of a layout exactly once, in order, at the offsets core's element_offset()
// gives, whatever the number of dims and operands and wherever the range starts and ends (the
// threads of a pass split the elements at arbitrary points, mid-row included).
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/strided.h"
#include "core/shape.h"
#include "core/strided_layout.h"

namespace {

using namespace tinyformer;

// Each element's offsets, in the order the walk gives them.
template <std::size_t N>
std::vector<std::int64_t> walked(const StridedLayout& layout, std::int64_t begin,
                                 std::int64_t end) {
  std::vector<std::int64_t> offsets;
  cpu::for_each_row<N>(layout, begin, end, [&](const std::int64_t* at, std::int64_t len) {
    CHECK(len > 0);
    for (std::int64_t j = 0; j < len; ++j) {
      for (std::size_t k = 0; k < N; ++k) offsets.push_back(at[k] + j * layout.inner_stride(k));
    }
  });
  return offsets;
}

template <std::size_t N>
std::vector<std::int64_t> expected(const StridedLayout& layout, std::int64_t begin,
                                   std::int64_t end) {
  std::vector<std::int64_t> offsets;
  for (std::int64_t i = begin; i < end; ++i) {
    for (std::size_t k = 0; k < N; ++k) offsets.push_back(element_offset(layout, i, k));
  }
  return offsets;
}

// Random shapes of 1 to 5 dims and strides for N operands (permuted, padded, broadcast dims,
// negative ones too), coalesced as the kernels do; every range of a few starts and ends.
template <std::size_t N>
void check_random_layouts(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> ndim_of(1, 5), size_of(1, 6), stride_of(-40, 40);
  for (int trial = 0; trial < 300; ++trial) {
    Shape shape(static_cast<std::size_t>(ndim_of(rng)));
    for (auto& s : shape) s = size_of(rng);
    std::vector<Shape> strides(N, Shape(shape.size()));
    for (auto& operand : strides) {
      for (auto& s : operand) s = stride_of(rng);
    }
    if (trial % 3 == 0) strides[0] = contiguous_strides(shape);  // a contiguous out
    const StridedLayout layout = N == 1 ? coalesce(shape, {&strides[0]})
                                 : N == 2
                                     ? coalesce(shape, {&strides[0], &strides[N - 1]})
                                     : coalesce(shape, {&strides[0], &strides[1], &strides[N - 1]});
    const std::int64_t n = shape_numel(shape);
    std::uniform_int_distribution<std::int64_t> point(0, n);
    for (int range = 0; range < 8; ++range) {
      std::int64_t begin = point(rng), end = point(rng);
      if (range == 0) begin = 0, end = n;
      if (begin > end) std::swap(begin, end);
      CAPTURE(shape_str(shape));
      CAPTURE(shape_str(layout.sizes));
      CAPTURE(begin);
      CAPTURE(end);
      CHECK(walked<N>(layout, begin, end) == expected<N>(layout, begin, end));
    }
  }
}

}  // namespace

TEST_CASE("for_each_row visits every element of any range once, at element_offset's offsets") {
  std::mt19937_64 rng(20261129);
  check_random_layouts<1>(rng);
  check_random_layouts<2>(rng);
  check_random_layouts<3>(rng);
}

TEST_CASE("for_each_row: the heads' split walks rows of the head width, plane by plane") {
  // [B, n, H, d] = [2, 5, 3, 4] read as [B, H, n, d]: rows of 4, planes of 5 rows.
  const Shape shape{2, 3, 5, 4};
  const Shape out = contiguous_strides(shape), in{60, 4, 12, 1};
  const StridedLayout layout = coalesce(shape, {&out, &in});
  REQUIRE(layout.sizes == shape);
  std::vector<std::int64_t> lengths;
  cpu::for_each_row<2>(layout, 6, 118,
                       [&](const std::int64_t*, std::int64_t len) { lengths.push_back(len); });
  // The range starts 2 elements into a row and ends 2 elements into one.
  REQUIRE(lengths.size() == 29);
  CHECK(lengths.front() == 2);
  CHECK(lengths.back() == 2);
  for (std::size_t i = 1; i + 1 < lengths.size(); ++i) CHECK(lengths[i] == 4);
  CHECK(walked<2>(layout, 6, 118) == expected<2>(layout, 6, 118));
  CHECK(walked<2>(layout, 0, 120) == expected<2>(layout, 0, 120));
  CHECK(walked<2>(layout, 7, 7).empty());
}
