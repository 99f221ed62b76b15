// Attention's heads reach the matrix products as views: a forward and backward of multi-head and
// Linformer attention (fused and textbook) makes no copy that changes a tensor's layout, such as
// splitting [B, n, H * d] into [B, H, n, d] or merging the heads back (docs/attention.md); the one
// exception is the gradient of a shared Linformer E, which packs one sequence's k compressed
// rows at a time.
#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "core/profiler.h"
#include "nn/tinyformer.h"

using namespace tinyformer;

namespace {

// Parses "copy [4x7x8] strides [56,8,1]" into sizes and strides.
bool parse_copy(const std::string& name, Shape& sizes, Shape& strides) {
  const auto open = name.find('['), mid = name.find("] strides [");
  if (name.rfind("copy", 0) != 0 || open == std::string::npos || mid == std::string::npos) {
    return false;
  }
  auto numbers = [](std::string text, char sep) {
    for (char& c : text) c = c == sep ? ' ' : c;
    std::istringstream in(text);
    Shape values;
    for (std::int64_t v; in >> v;) values.push_back(v);
    return values;
  };
  sizes = numbers(name.substr(open + 1, mid - open - 1), 'x');
  const auto start = mid + std::string("] strides [").size();
  strides = numbers(name.substr(start, name.find(']', start) - start), ',');
  return sizes.size() == strides.size();
}

// The copies the profiler saw whose source is not laid out contiguously: each one a layout change
// (a transposed or permuted tensor made contiguous). Copies of contiguous sources (a gradient
// stored into a parameter's grad) are not counted.
std::vector<std::string> layout_copies(const Profiler& profiler) {
  std::vector<std::string> found;
  for (const OpProfile& op : profiler.ops()) {
    if (op.name.rfind("copy", 0) != 0) continue;
    Shape sizes, strides;
    REQUIRE_MESSAGE(parse_copy(op.name, sizes, strides), "unparsed profiler row: ", op.name);
    const Shape want = contiguous_strides(sizes);
    bool contiguous = true;
    for (std::size_t d = 0; d < sizes.size(); ++d) {
      contiguous = contiguous && (sizes[d] == 1 || strides[d] == want[d]);
    }
    if (!contiguous) found.push_back(op.name);
  }
  return found;
}

// Runs a forward and backward of `layer` on x under a by-shape profiler; the layout copies seen
// of more than `allowed_numel` elements, joined.
std::string copies_of(nn::Attention& layer, const Tensor& x,
                      const Tensor& key_padding_mask = Tensor(), std::int64_t allowed_numel = 0) {
  Tensor input = x.detach().requires_grad_(true);
  Profiler profiler(/*by_shape=*/true);
  Tensor y = layer.forward(input, key_padding_mask, false);
  sum(mul(y, y)).backward();
  CHECK(input.grad().defined());
  CHECK(input.grad().is_contiguous());
  std::string joined;  // a string, so that a failing check prints the copies
  for (const std::string& c : layout_copies(profiler)) {
    Shape sizes, strides;
    parse_copy(c, sizes, strides);
    if (shape_numel(sizes) > allowed_numel) joined += c + "; ";
  }
  return joined;
}

}  // namespace

TEST_CASE("attention: no head split or merge copies, forward and backward") {
  const std::int64_t b = 2, n = 7, d_model = 12, heads = 3;
  const Tensor x = randn({b, n, d_model});
  for (bool fused : {true, false}) {
    INFO("fused ", fused);
    nn::MultiHeadAttention mha(d_model, heads, 0.0, fused);
    CHECK(copies_of(mha, x) == "");
    // A key-padding mask adds masked_fill, not a copy.
    Tensor padding = zeros({b, n}, {.dtype = DType::boolean});
    CHECK(copies_of(mha, x, padding) == "");

    const nn::ProjectionSpec spec{.k = 4, .max_seq_len = n, .head_dim = d_model / heads};
    nn::LinformerAttention linformer(d_model, heads, nn::make_projection("linear", spec),
                                     nn::make_projection("linear", spec), 0.0, fused);
    // The gradient of a shared E gathers one sequence's k compressed rows of every head into
    // one product ([k, H * d]); that packing of k rows is allowed, no copy of the n rows is.
    CHECK(copies_of(linformer, x, Tensor(), spec.k * d_model) == "");
  }
}

TEST_CASE("attention copies: the check sees a merge of heads that copies") {
  // The same profile of a merge written as a copy (what merging contiguous heads costs) finds it:
  // the test above can fail.
  const Tensor heads = randn({2, 3, 7, 4}).requires_grad_(true);  // [B, H, n, d] contiguous
  Profiler profiler(/*by_shape=*/true);
  Tensor merged = heads.transpose(1, 2).reshape({2, 7, 12});
  sum(mul(merged, merged)).backward();
  const std::vector<std::string> copies = layout_copies(profiler);
  CHECK(std::find(copies.begin(), copies.end(), "copy [2x7x3x4] strides [84,4,28,1]") !=
        copies.end());
}
