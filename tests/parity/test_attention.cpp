// Parity of the fused attention ops (attention and attention_backward) against the reference
// backend: float32 and float64; no batch dim, one and two; sizes past the CPU kernel's blocks of
// rows and key columns; the query as heads (a [B, H, n, d] view of a [B, n, H, d] buffer), keys
// contiguous, values as rows of a wider matrix; no mask, a key-padding mask expanded to the
// scores, a full random mask and the causal rule; empty sizes; rows with every key excluded
// (NaN); bad input. The memory-efficient ops (flash_attention and flash_attention_backward) on
// the same cases, with dropout, past the CPU kernel's tiles (64 query rows, 512 keys), one
// matrix per item (8 or more matrices) and the two passes of fewer.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/tensor.h"
#include "parity/parity.h"

namespace {

using namespace tinyformer;
using namespace tinyformer::parity;

TF_PARITY_COVERS(attention);
TF_PARITY_COVERS(attention_backward);
TF_PARITY_COVERS(flash_attention);
TF_PARITY_COVERS(flash_attention_backward);

struct Sizes {
  std::int64_t n, m, d, dv;
};

enum class MaskKind { none, padding, full };

const char* mask_name(MaskKind kind) {
  switch (kind) {
    case MaskKind::none:
      return "no mask";
    case MaskKind::padding:
      return "key-padding mask";
    case MaskKind::full:
      return "full mask";
  }
  return "?";
}

Shape with(Shape batch, std::int64_t rows, std::int64_t cols) {
  batch.push_back(rows);
  batch.push_back(cols);
  return batch;
}

// The query: heads, [batch..., n, d] as a view whose rows are H * d apart when there are two
// batch dims (the middle one then lies between the rows), else contiguous.
Pair make_query(const Shape& batch, std::int64_t n, std::int64_t d, DType dtype,
                std::uint64_t seed) {
  if (batch.size() != 2) return make_pair(with(batch, n, d), dtype, Layout::contiguous, seed);
  const Pair buffer = make_pair({batch[0], n, batch[1], d}, dtype, Layout::contiguous, seed);
  return {buffer.ref.transpose(1, 2), buffer.dev.transpose(1, 2)};
}

// The value: [batch..., m, dv] as the first dv columns of rows dv + 3 wide.
Pair make_value(const Shape& batch, std::int64_t m, std::int64_t dv, DType dtype,
                std::uint64_t seed) {
  const Pair wide = make_pair(with(batch, m, dv + 3), dtype, Layout::contiguous, seed);
  const std::int64_t last = static_cast<std::int64_t>(batch.size()) + 1;
  return {wide.ref.narrow(last, 0, dv), wide.dev.narrow(last, 0, dv)};
}

// A mask of `kind` broadcast to the scores [batch..., n, m]; true (excluded) with probability
// about 0.3, so that no row is excluded everywhere unless m is small.
Pair make_mask(MaskKind kind, const Shape& batch, std::int64_t n, std::int64_t m,
               std::uint64_t seed) {
  if (kind == MaskKind::none) return {};
  const Shape scores = with(batch, n, m);
  Shape shape = scores;
  if (kind == MaskKind::padding) {
    for (std::size_t i = 1; i + 1 < shape.size(); ++i) shape[i] = 1;  // [B, 1, ..., 1, m]
  }
  const Pair mask = make_pair(shape, DType::boolean, Layout::contiguous, seed, -0.7, 0.3);
  return {raw::expand(mask.ref, scores, "test"), raw::expand(mask.dev, scores, "test")};
}

std::string what_of(const Shape& batch, const Sizes& s, DType dtype, MaskKind mask, bool causal) {
  return std::string("attention ") + dtype_name(dtype) + " batch " + shape_str(batch) + " n " +
         std::to_string(s.n) + " m " + std::to_string(s.m) + " d " + std::to_string(s.d) + " dv " +
         std::to_string(s.dv) + ", " + mask_name(mask) + (causal ? ", causal" : "");
}

// float32 sums up to a few hundred products; its exp is a polynomial good to a few ulp.
double rtol_of(DType dtype) {
  return dtype == DType::float64 ? 1e-11 : 2e-5;
}
double atol_of(DType dtype) {
  return dtype == DType::float64 ? 1e-12 : 2e-6;
}

// Forward and backward of one case on both backends; backward only where no row is excluded
// everywhere (a NaN row's gradient is NaN on both, through products that need not agree on it).
void check_case(const Shape& batch, const Sizes& s, DType dtype, MaskKind mask_kind, bool causal,
                std::uint64_t seed) {
  const std::string what = what_of(batch, s, dtype, mask_kind, causal);
  CAPTURE(what);
  const double scale = 1.0 / std::sqrt(static_cast<double>(std::max<std::int64_t>(s.d, 1)));
  const Pair q = make_query(batch, s.n, s.d, dtype, seed);
  const Pair k = make_pair(with(batch, s.m, s.d), dtype, Layout::contiguous, seed + 1);
  const Pair v = make_value(batch, s.m, s.dv, dtype, seed + 2);
  const Pair mask = make_mask(mask_kind, batch, s.n, s.m, seed + 3);
  Pair probs = make_output(with(batch, s.n, s.m), dtype);
  Pair out = make_output(with(batch, s.n, s.dv), dtype);
  dev().attention(q.dev, k.dev, v.dev, mask.dev, causal, scale, probs.dev, out.dev);
  ref().attention(q.ref, k.ref, v.ref, mask.ref, causal, scale, probs.ref, out.ref);
  check_close(probs, what + ": probs", rtol_of(dtype), atol_of(dtype));
  check_close(out, what + ": out", rtol_of(dtype), atol_of(dtype));

  const Tensor host_probs = probs.ref;
  bool nan_row = false;
  for (double p : raw::to_dtype(host_probs, DType::float64).to_vector<double>()) {
    nan_row = nan_row || std::isnan(p);
  }
  if (nan_row) return;
  const Pair g = make_query(batch, s.n, s.dv, dtype, seed + 4);
  Pair gq = make_output(with(batch, s.n, s.d), dtype);
  Pair gk = make_output(with(batch, s.m, s.d), dtype);
  Pair gv = make_output(with(batch, s.m, s.dv), dtype);
  dev().attention_backward(g.dev, q.dev, k.dev, v.dev, probs.dev, causal, scale, gq.dev, gk.dev,
                           gv.dev);
  ref().attention_backward(g.ref, q.ref, k.ref, v.ref, probs.ref, causal, scale, gq.ref, gk.ref,
                           gv.ref);
  check_close(gq, what + ": grad_query", rtol_of(dtype), atol_of(dtype));
  check_close(gk, what + ": grad_key", rtol_of(dtype), atol_of(dtype));
  check_close(gv, what + ": grad_value", rtol_of(dtype), atol_of(dtype));
}

TEST_CASE("parity: attention and its backward") {
  if (!available()) return;
  // Sizes of 1, odd sizes, and n, m past the CPU kernel's blocks (16 to 256 rows, key columns
  // likewise).
  const Sizes sizes[] = {
      {1, 1, 1, 1}, {5, 7, 4, 3}, {33, 17, 8, 8}, {130, 300, 16, 9}, {300, 40, 3, 1}};
  // The CPU kernel's backward runs a matrix per thread from 16 matrices on ({4, 5}), and blocks
  // of rows and of key columns below.
  const std::vector<Shape> batches = {{}, {3}, {2, 3}, {4, 5}};
  std::uint64_t seed = 100;
  for (DType dtype : supported({DType::float32, DType::float64})) {
    for (const Shape& batch : batches) {
      for (const Sizes& s : sizes) {
        // The reference's loops are slow: the largest size runs with fewer matrices only.
        if (batch.size() == 2 && batch[0] == 4 && s.m == 300) continue;
        for (MaskKind mask : {MaskKind::none, MaskKind::padding, MaskKind::full}) {
          for (bool causal : {false, true}) check_case(batch, s, dtype, mask, causal, seed += 5);
        }
      }
    }
  }
}

TEST_CASE("parity: attention over 1024 keys and more") {
  if (!available()) return;
  // From 1024 keys on, the CPU runs out = P v and the backward's dP and grad_query a group of
  // rows at a time on its AVX-512 kernels where the CPU has them (and prefetches the
  // probabilities), and with 16 matrices or more (a matrix per thread) the key and value
  // gradients a block of rows at a time: rows past a group of 24, keys past a panel of 64 and
  // past a chunk of 128, head widths under a panel; one matrix, a few (blocks of key columns in
  // the backward), and 16 or more.
  std::uint64_t seed = 400;
  for (DType dtype : supported({DType::float32, DType::float64})) {
    for (const Shape& batch : {Shape{}, Shape{2, 3}, Shape{4, 4}}) {
      for (MaskKind mask : {MaskKind::none, MaskKind::padding}) {
        for (bool causal : {false, true}) {
          // The reference's loops are slow: the most matrices with neither mask nor rule only.
          if (batch.size() == 2 && batch[0] == 4 && (mask != MaskKind::none || causal)) continue;
          check_case(batch, {30, 1030, 16, 9}, dtype, mask, causal, seed += 5);
        }
      }
    }
  }
  // A matrix per thread over two blocks of rows (256 and 4), the second block's key and value
  // gradients added to the first's (on AVX-512 in float32); under the causal rule the second
  // block reaches further keys.
  if (supports(DType::float32)) {
    for (bool causal : {false, true}) {
      check_case({4, 4}, {260, 1030, 8, 5}, DType::float32, MaskKind::none, causal, seed += 5);
    }
  }
}

TEST_CASE("parity: attention with empty sizes and rows that exclude every key") {
  if (!available()) return;
  for (DType dtype : supported({DType::float32, DType::float64})) {
    // n, m, d or dv of 0: no rows; no keys (out is 0); no query width (uniform probabilities);
    // no value width. A batch dim of 0 too.
    for (const Sizes& s :
         {Sizes{0, 4, 3, 2}, Sizes{3, 0, 3, 2}, Sizes{3, 4, 0, 2}, Sizes{3, 4, 3, 0}}) {
      check_case({2}, s, dtype, MaskKind::none, false, 7);
    }
    check_case({0, 2}, {3, 4, 3, 2}, dtype, MaskKind::none, false, 8);
    // m = 1 with a full mask at 30%: some rows exclude their one key and are NaN on both sides.
    check_case({4}, {9, 1, 3, 2}, dtype, MaskKind::full, false, 9);
  }
}

// An uninitialised tensor on the target's device, for the bad-input cases.
Tensor on_dev(const Shape& shape, DType dtype = DType::float32) {
  return empty(shape, {.dtype = dtype, .device = device()});
}

// `call` throws an Error whose message names `op` and contains `part`.
template <typename F>
void fails(const std::string& op, F&& call, const std::string& part) {
  const std::string msg = error_of(call);
  INFO(msg);
  CHECK(msg.find(op) != std::string::npos);
  CHECK(msg.find(part) != std::string::npos);
}

// flash_attention and its backward on one case, both backends, with dropout probability p
// (the same counters on both: seed 11, offset 5). The backward also where rows are NaN: every
// gradient they reach is NaN on both sides, which check_close compares as equal.
void check_flash_case(const Shape& batch, const Sizes& s, DType dtype, MaskKind mask_kind,
                      bool causal, double p, std::uint64_t seed) {
  const std::string what = std::string("flash ") + what_of(batch, s, dtype, mask_kind, causal) +
                           ", dropout " + std::to_string(p);
  CAPTURE(what);
  const double scale = 1.0 / std::sqrt(static_cast<double>(std::max<std::int64_t>(s.d, 1)));
  const AttentionDropout dropout = attention_dropout(p, 11, 5);
  const Pair q = make_query(batch, s.n, s.d, dtype, seed);
  const Pair k = make_pair(with(batch, s.m, s.d), dtype, Layout::contiguous, seed + 1);
  const Pair v = make_value(batch, s.m, s.dv, dtype, seed + 2);
  const Pair mask = make_mask(mask_kind, batch, s.n, s.m, seed + 3);
  Shape rows = batch;
  rows.push_back(s.n);
  Pair lse = make_output(rows, dtype);
  Pair out = make_output(with(batch, s.n, s.dv), dtype);
  dev().flash_attention(q.dev, k.dev, v.dev, mask.dev, causal, scale, dropout, out.dev, lse.dev);
  ref().flash_attention(q.ref, k.ref, v.ref, mask.ref, causal, scale, dropout, out.ref, lse.ref);
  check_close(lse, what + ": lse", rtol_of(dtype), atol_of(dtype));
  check_close(out, what + ": out", rtol_of(dtype), atol_of(dtype));

  bool nan_row = false;
  for (double l : raw::to_dtype(lse.ref, DType::float64).to_vector<double>()) {
    nan_row = nan_row || std::isnan(l);
  }
  if (nan_row) return;
  const Pair g = make_query(batch, s.n, s.dv, dtype, seed + 4);
  Pair gq = make_output(with(batch, s.n, s.d), dtype);
  Pair gk = make_output(with(batch, s.m, s.d), dtype);
  Pair gv = make_output(with(batch, s.m, s.dv), dtype);
  // Both backends read the reference's out and lse: the gradients then depend on their own
  // arithmetic only.
  const Tensor out_dev = to_dev(out.ref), lse_dev = to_dev(lse.ref);
  dev().flash_attention_backward(g.dev, q.dev, k.dev, v.dev, out_dev, lse_dev, mask.dev, causal,
                                 scale, dropout, gq.dev, gk.dev, gv.dev);
  ref().flash_attention_backward(g.ref, q.ref, k.ref, v.ref, out.ref, lse.ref, mask.ref, causal,
                                 scale, dropout, gq.ref, gk.ref, gv.ref);
  check_close(gq, what + ": grad_query", rtol_of(dtype), atol_of(dtype));
  check_close(gk, what + ": grad_key", rtol_of(dtype), atol_of(dtype));
  check_close(gv, what + ": grad_value", rtol_of(dtype), atol_of(dtype));
}

TEST_CASE("parity: attention, memory-efficient (flash_attention and its backward)") {
  if (!available()) return;
  // n = 1, k > n, odd sizes, and n, m past the CPU kernel's tiles (64 rows, 512 keys).
  const Sizes sizes[] = {{1, 1, 1, 1}, {5, 7, 4, 3}, {33, 17, 8, 8}, {130, 300, 16, 9}};
  // Fewer than 8 matrices: the CPU backward's two passes; 8 or more: a matrix per item.
  const std::vector<Shape> batches = {{}, {2, 3}, {2, 4}};
  std::uint64_t seed = 700;
  for (DType dtype : supported({DType::float32, DType::float64})) {
    for (const Shape& batch : batches) {
      for (const Sizes& s : sizes) {
        if (batch.size() == 2 && batch[1] == 4 && s.m == 300 && dtype == DType::float64) continue;
        for (MaskKind mask : {MaskKind::none, MaskKind::padding, MaskKind::full}) {
          for (bool causal : {false, true}) {
            check_flash_case(batch, s, dtype, mask, causal, 0.0, seed += 5);
          }
        }
        check_flash_case(batch, s, dtype, MaskKind::padding, false, 0.25, seed += 5);
        check_flash_case(batch, s, dtype, MaskKind::none, true, 0.5, seed += 5);
      }
    }
    // Past a tile of rows and of keys, causal: tiles the rule skips on either side.
    check_flash_case({2}, {300, 520, 8, 5}, dtype, MaskKind::none, true, 0.0, seed += 5);
    check_flash_case({8}, {260, 270, 8, 5}, dtype, MaskKind::padding, true, 0.1, seed += 5);
    // Past a tile of keys with a matrix per item, and a head wider than a panel of 64.
    check_flash_case({8}, {70, 530, 8, 5}, dtype, MaskKind::padding, false, 0.2, seed += 5);
    check_flash_case({2}, {70, 600, 70, 66}, dtype, MaskKind::none, true, 0.0, seed += 5);
  }
}

TEST_CASE("parity: attention, memory-efficient, with empty sizes and rows that exclude every key") {
  if (!available()) return;
  for (DType dtype : supported({DType::float32, DType::float64})) {
    for (const Sizes& s :
         {Sizes{0, 4, 3, 2}, Sizes{3, 0, 3, 2}, Sizes{3, 4, 0, 2}, Sizes{3, 4, 3, 0}}) {
      check_flash_case({2}, s, dtype, MaskKind::none, false, 0.0, 7);
      check_flash_case({2}, s, dtype, MaskKind::none, true, 0.3, 7);
    }
    check_flash_case({0, 2}, {3, 4, 3, 2}, dtype, MaskKind::none, false, 0.0, 8);
    check_flash_case({4}, {9, 1, 3, 2}, dtype, MaskKind::full, false, 0.0, 9);
    // Every element dropped (p = 1): out and the gradients of key and value are 0.
    check_flash_case({3}, {6, 5, 4, 3}, dtype, MaskKind::padding, false, 1.0, 10);
  }
}

TEST_CASE("parity: attention, memory-efficient: bad input is an Error naming the op") {
  if (!available() || !supports(DType::float32)) return;
  const Tensor q = on_dev({2, 3, 4}), k = on_dev({2, 5, 4}), v = on_dev({2, 5, 6});
  const Tensor lse = on_dev({2, 3}), out = on_dev({2, 3, 6});
  const AttentionDropout none;
  const std::string op = "flash_attention";
  fails(
      op,
      [&] {
        dev().flash_attention(q, k, v, {}, false, 0.5, none, out, on_dev({2, 4}));
      },
      "lse of shape [2, 3]");
  fails(
      op,
      [&] {
        dev().flash_attention(q, k, v, {}, false, 0.5, none, on_dev({2, 3, 5}), lse);
      },
      "out of shape [2, 3, 6]");
  fails(
      op,
      [&] {
        dev().flash_attention(q, k, v, {}, false, 0.5, attention_dropout(1.5, 0, 0), out, lse);
      },
      "dropout probability in [0, 1]");
  fails(
      op,
      [&] {
        dev().flash_attention(q, k, v, on_dev({2, 3, 5}), false, 0.5, none, out, lse);
      },
      "excluded_mask of dtype bool");
  fails(
      op, [&] { dev().flash_attention(q, k, v, {}, false, 0.5, none, out, q.narrow(2, 0, 3)); },
      "lse");
  const std::string bop = "flash_attention_backward";
  const Tensor g = on_dev({2, 3, 6}), gq = on_dev({2, 3, 4}), gk = on_dev({2, 5, 4}),
               gv = on_dev({2, 5, 6});
  fails(
      bop,
      [&] {
        dev().flash_attention_backward(g, q, k, v, out, on_dev({3, 2}), {}, false, 0.5, none, gq,
                                       gk, gv);
      },
      "lse of shape [2, 3]");
  fails(
      bop,
      [&] {
        dev().flash_attention_backward(g, q, k, v, out, lse, {}, false, 0.5, none, gq,
                                       on_dev({2, 4, 4}), gv);
      },
      "grad_key of shape [2, 5, 4]");
  fails(
      bop,
      [&] {
        const Tensor both = on_dev({2, 5, 10});  // grad_key and grad_value in one buffer
        dev().flash_attention_backward(g, q, k, v, out, lse, {}, false, 0.5, none, gq,
                                       both.narrow(2, 0, 4), both.narrow(2, 4, 6));
      },
      "share memory");
}

TEST_CASE("parity: attention's bad input is an Error naming the op") {
  if (!available() || !supports(DType::float32)) return;
  const Tensor q = on_dev({2, 3, 4}), k = on_dev({2, 5, 4}), v = on_dev({2, 5, 6});
  const Tensor probs = on_dev({2, 3, 5}), out = on_dev({2, 3, 6});
  const auto run = [&](const Tensor& q_, const Tensor& k_, const Tensor& v_, const Tensor& mask,
                       const Tensor& probs_, const Tensor& out_) {
    return [&, q_, k_, v_, mask, probs_, out_] {
      dev().attention(q_, k_, v_, mask, false, 0.5, probs_, out_);
    };
  };
  const std::string op = "attention";
  fails(op, run(q, on_dev({2, 5, 3}), v, {}, probs, out), "key of shape [2, 5, 4]");
  fails(op, run(q, k, on_dev({2, 4, 6}), {}, probs, out), "value of shape [2, 5, 6]");
  fails(op, run(on_dev({3, 4}), k, v, {}, probs, out), "same number of dims");
  fails(op, run(q, k, v, {}, on_dev({2, 5, 3}), out), "probs of shape [2, 3, 5]");
  fails(op, run(q, k, v, {}, probs, on_dev({2, 3, 5})), "out of shape [2, 3, 6]");
  fails(op, run(q, k, v, on_dev({2, 3, 5}), probs, out), "excluded_mask of dtype bool");
  fails(op, run(q, k, v, on_dev({1, 3, 5}, DType::boolean), probs, out), "shape [2, 3, 5]");
  fails(op, run(on_dev({2, 4, 3}).transpose(1, 2), k, v, {}, probs, out), "unit stride");
  fails(op, run(q, k, v, {}, probs, raw::expand(on_dev({1, 3, 6}), {2, 3, 6}, "test")),
        "do not overlap");
  fails(op, run(q, k, v, {}, on_dev({2, 5, 3}).transpose(1, 2), out), "contiguous probs");
  fails(op, run(q, k, v, {}, probs, q.narrow(2, 0, 1).expand({2, 3, 6})), "unit stride");
  fails(op,
        run(on_dev({2, 3, 4}, DType::int64), on_dev({2, 5, 4}, DType::int64),
            on_dev({2, 5, 6}, DType::int64), {}, on_dev({2, 3, 5}, DType::int64),
            on_dev({2, 3, 6}, DType::int64)),
        "int64");
  fails(op, run(q, k, v, {}, probs, v.narrow(1, 0, 3)), "shares memory");
  fails(
      op, [&] { dev().attention(q, k, v, {}, false, std::nan(""), probs, out); }, "finite scale");

  const std::string bop = "attention_backward";
  const Tensor g = on_dev({2, 3, 6}), gq = on_dev({2, 3, 4}), gk = on_dev({2, 5, 4}),
               gv = on_dev({2, 5, 6});
  fails(
      bop,
      [&] {
        dev().attention_backward(on_dev({2, 3, 5}), q, k, v, probs, false, 0.5, gq, gk, gv);
      },
      "grad of shape [2, 3, 6]");
  fails(
      bop,
      [&] {
        dev().attention_backward(g, q, k, v, probs, false, 0.5, gq, on_dev({2, 4, 4}), gv);
      },
      "grad_key of shape [2, 5, 4]");
  const Tensor both = on_dev({2, 5, 10});  // grad_key and grad_value in one buffer
  fails(
      bop,
      [&] {
        dev().attention_backward(g, q, k, v, probs, false, 0.5, gq, both.narrow(2, 0, 4),
                                 both.narrow(2, 4, 6));
      },
      "share memory");
  fails(
      bop, [&] { dev().attention_backward(g, q, k, v, probs, false, 0.5, q, gk, gv); },
      "shares memory with an input");
}

}  // namespace
