// Embedding lookup (a row gather, whose backward scatter-adds) and dropout (a multiplication
// by a random keep-mask, whose backward comes free from mul).
#include "autograd/embedding.h"

#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/backend.h"

namespace tinyformer {

using autograd::record;
using autograd::save;

// out[..., :] = weight[indices[...], :]
//   d weight[v, :] = sum of g[i, :] over the positions i where indices[i] == v
Tensor embedding(const Tensor& weight, const Tensor& indices) {
  TF_CHECK(weight.defined() && indices.defined(),
           "embedding: expected defined tensors, got an undefined Tensor");
  TF_CHECK(weight.dim() == 2, "embedding: expected a weight of shape [V, D], got ",
           shape_str(weight.shape()));
  TF_CHECK(is_floating(weight.dtype()), "embedding: expected a floating weight, got ",
           weight.dtype());
  TF_CHECK(indices.dtype() == DType::int64, "embedding: expected int64 indices, got ",
           indices.dtype());
  TF_CHECK(indices.device() == weight.device(), "embedding: the indices are on ", indices.device(),
           ", the weight on ", weight.device());
  const std::int64_t vocab = weight.size(0), d = weight.size(1), n = indices.numel();
  // idx: [N], out: [N, D] seen as indices.shape + [D].
  Shape out_shape = indices.shape();
  out_shape.push_back(d);
  shape_numel(out_shape, "embedding");  // throws when the [N, D] output is too large to count
  const Tensor ic = raw::contiguous(indices);
  const Tensor idx = raw::as_strided(ic, {n}, {1}, ic.offset());
  Tensor out = empty(out_shape, {.dtype = weight.dtype(), .device = weight.device()});
  if (out.numel() > 0) {
    try {
      backend(weight.device()).index_select(weight, idx, raw::as_strided(out, {n, d}, {d, 1}, 0));
    } catch (const IndexOutOfRange& e) {
      // The gather's own message would name index_select; the user gave token ids.
      Shape at(indices.shape().size());  // the position as an index into `indices`
      for (std::int64_t rest = e.position, dim = indices.dim() - 1; dim >= 0; --dim) {
        at[static_cast<std::size_t>(dim)] = rest % indices.size(dim);
        rest /= indices.size(dim);
      }
      fail("Embedding: token id ", e.value, " at ", shape_str(at), " is out of range [0, ", vocab,
           ") (the embedding has ", vocab, " rows)");
    }
  }
  Tensor saved_idx = save(idx);
  return record("embedding", out, {weight}, [saved_idx, vocab, n, d](const Tensor& g) {
    Tensor gw = zeros({vocab, d}, {.dtype = g.dtype(), .device = g.device()});
    if (n > 0 && d > 0) {
      const Tensor gc = raw::contiguous(g);
      backend(g.device())
          .index_add(raw::as_strided(gc, {n, d}, {d, 1}, gc.offset()), saved_idx, gw);
    }
    return std::vector<Tensor>{gw};
  });
}

// y = x * mask / (1 - p) with mask[i] ~ Bernoulli(1 - p), so E[y] = x.
Tensor dropout(const Tensor& x, double p, bool training, Generator* generator) {
  TF_CHECK(x.defined(), "dropout: expected a defined tensor, got an undefined Tensor");
  TF_CHECK(is_floating(x.dtype()), "dropout: expected a floating tensor, got ", x.dtype());
  TF_CHECK(p >= 0.0 && p <= 1.0, "dropout: expected a probability p in [0, 1], got ", p);
  if (!training || p == 0.0) return x;
  Generator& gen = generator != nullptr ? *generator : default_generator();
  const auto [seed, offset] = gen.reserve(static_cast<std::uint64_t>(x.numel()));
  // The mask holds 1 / (1 - p) where it keeps (one draw, no pass to scale it); p = 1 keeps
  // nothing, and the mask is 0 everywhere (x * 0, as PyTorch's dropout gives).
  Tensor mask = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  if (mask.numel() > 0) {
    backend(x.device())
        .random(mask, RandomKind::scaled_bernoulli, seed, offset, 1.0 - p, dropout_scale(p));
  }
  return x * mask;
}

}  // namespace tinyformer
