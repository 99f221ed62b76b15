// Solutions to the exercises of tutorial step 2 (docs/tutorial/02-multi-head.md): the heads do not
// interact (swapping two heads' weights changes nothing), splitting into heads moves no data, and
// what grows with the number of heads. One function per exercise; each checks its result.
#include "tutorial.h"

using namespace tinyformer;
using tutorial::check;

namespace {

// Exercise 2.1: swap head 0 and head 1. Head h owns rows h*d_head .. (h+1)*d_head - 1 of Wq, Wk,
// Wv and their biases (W is stored [out, in]) and the same columns of Wo. Swapping both blocks
// swaps the heads' outputs and puts them back in Wo's product: the layer's output is unchanged.
void swap_two_heads() {
  std::printf("Exercise 2.1: swap two heads\n");
  const std::int64_t d_model = 8, heads = 2, d_head = d_model / heads;
  nn::MultiHeadAttention mha(d_model, heads);
  const Tensor x = randn({2, 5, d_model});
  const Tensor before = mha.forward(x);
  auto swapped = [&](const Tensor& t, std::int64_t dim) {  // the two d_head blocks of `dim`
    return cat({t.narrow(dim, d_head, d_head), t.narrow(dim, 0, d_head)}, dim);
  };
  {
    NoGradGuard no_grad;
    for (const auto& linear : {mha.q_proj, mha.k_proj, mha.v_proj}) {
      raw::copy(swapped(linear->weight, 0), linear->weight);
      raw::copy(swapped(linear->bias, 0), linear->bias);
    }
    raw::copy(swapped(mha.out_proj->weight, 1), mha.out_proj->weight);
  }
  const Tensor after = mha.forward(x);
  std::printf("  max |output before - after the swap| = %.3g\n",
              tutorial::max_abs_diff(before, after));
  check(tutorial::max_abs_diff(before, after) < 1e-6,
        "2.1 swapping two heads' weights (Wq, Wk, Wv rows and Wo columns) leaves the output");
  // Swapping Wq's rows alone is not a symmetry: head 0 would query head 1's keys.
  raw::copy(swapped(mha.q_proj->weight, 0), mha.q_proj->weight);
  check(tutorial::max_abs_diff(before, mha.forward(x)) > 1e-3,
        "2.1 swapping the queries alone changes the output");
}

// Exercise 2.2: the split into heads is a view. [B, n, d_model] -> [B, H, n, d_head] shares the
// input's storage (no copy) and is not contiguous; whether merging copies depends on the layout
// of attention's output.
void heads_are_a_view() {
  std::printf("Exercise 2.2: the split into heads moves no data\n");
  const std::int64_t batch = 2, n = 5, heads = 4, d_head = 3;
  const Tensor x = randn({batch, n, heads * d_head});
  const Tensor split = x.view({batch, n, heads, d_head}).transpose(1, 2);  // [B, H, n, d_head]
  std::printf("  x %s, strides %s -> heads %s, strides %s\n", shape_str(x.shape()).c_str(),
              shape_str(x.strides()).c_str(), shape_str(split.shape()).c_str(),
              shape_str(split.strides()).c_str());
  check(split.storage() == x.storage() && split.data_ptr() == x.data_ptr(),
        "2.2 the split heads share the input's storage: no data moved");
  check(!split.is_contiguous(), "2.2 ... and are not contiguous (head h's rows are strided)");
  // Element [b, h, i, c] of the heads is element [b, i, h * d_head + c] of x.
  check(split.select(0, 1).select(0, 2).select(0, 3).select(0, 1).item<float>() ==
            x.select(0, 1).select(0, 3).select(0, 2 * d_head + 1).item<float>(),
        "2.2 heads[b, h, i, c] = x[b, i, h d_head + c]");
  // Transposing back restores x's own layout, so merging the split is a view as well.
  const Tensor merged = split.transpose(1, 2).reshape({batch, n, heads * d_head});
  check(tutorial::max_abs_diff(merged, x) == 0 && merged.storage() == x.storage(),
        "2.2 merging the split gives x back, again without a copy");
  // fused_attention writes its output laid out like the query (autograd/attention.cpp,
  // matmul_like): [B, H, n, d_head] over a [B, n, H, d_head] buffer, so merging it needs no
  // copy either.
  const Tensor out = fused_attention(split, split, split);
  const Tensor out_merged = out.transpose(1, 2).reshape({batch, n, heads * d_head});
  std::printf("  attention's output %s, strides %s\n", shape_str(out.shape()).c_str(),
              shape_str(out.strides()).c_str());
  check(!out.is_contiguous() && out_merged.storage() == out.storage(),
        "2.2 attention's output is laid out like the query: merging it copies nothing");
  // Given contiguous heads, the output is contiguous [B, H, n, d_head] and merging copies.
  const Tensor packed = split.contiguous();
  const Tensor out_packed = fused_attention(packed, packed, packed);
  check(out_packed.is_contiguous() &&
            out_packed.transpose(1, 2).reshape({batch, n, heads * d_head}).storage() !=
                out_packed.storage(),
        "2.2 from contiguous heads the output is contiguous, and merging it copies once");
}

// Exercise 2.3: at a fixed d_model the parameters do not depend on the number of heads; the
// attention maps [B, H, n, n] grow with it.
void what_grows_with_heads() {
  std::printf("Exercise 2.3: what grows with the number of heads\n");
  const std::int64_t d_model = 64, batch = 2, n = 32;
  const Tensor x = randn({batch, n, d_model});
  std::printf("  %6s %12s %22s\n", "heads", "parameters", "attention map floats");
  std::vector<std::int64_t> params, maps;
  for (std::int64_t heads : {1, 2, 4, 8}) {
    nn::MultiHeadAttention mha(d_model, heads);
    mha.keep_attention(true);
    mha.forward(x);
    params.push_back(mha.num_parameters());
    maps.push_back(mha.last_attention().numel());
    std::printf("  %6lld %12lld %22lld\n", static_cast<long long>(heads),
                static_cast<long long>(params.back()), static_cast<long long>(maps.back()));
  }
  check(std::all_of(params.begin(), params.end(), [&](std::int64_t p) { return p == params[0]; }),
        "2.3 the parameter count is the same for 1, 2, 4 and 8 heads (4 d^2 + 4 d)");
  check(maps[3] == 8 * maps[0] && maps[0] == batch * n * n,
        "2.3 the attention maps hold B H n^2 numbers: 8 heads, 8 times as many as one");
}

}  // namespace

int main() {
  manual_seed(102);
  std::printf("Step 2, exercises\n");
  swap_two_heads();
  heads_are_a_view();
  what_grows_with_heads();
  return tutorial::finish();
}
