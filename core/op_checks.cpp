// The argument rules of the primitive ops (see op_checks.h): one place for the checks every
// backend runs before its kernels, so that every backend rejects the same calls with the same
// messages. Nothing here depends on which backend checks: what differs between backends (the
// dtypes their kernels take, their device type) is asked of the backend.
#include "core/op_checks.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/checked.h"
#include "core/error.h"
#include "core/gemm.h"

namespace tinyformer {

namespace {

// The op's output (or, where the outputs are optional, its first input) is on the backend's kind
// of device; every other operand must then be on that same device.
void check_backend_device(const Tensor& t, const char* op, const char* name,
                          const Backend& backend) {
  TF_CHECK(t.device().type == backend.device_type(), op, ": the ", backend.name(), " backend got ",
           name, " on ", t.device());
}
void check_device(const Tensor& t, const char* op, const char* name, const Device& device) {
  TF_CHECK(t.device() == device, op, ": expected ", name, " on ", device, ", got ", t.device());
}

// The dtype `dtype` is one the backend's kernels take for `kind`; `what` follows the list in the
// message ("float32 or float64 tensors of one dtype").
void check_supported(Op kind, DType dtype, const char* op, const Backend& backend,
                     const char* what = "") {
  TF_CHECK(backend.supports(kind, dtype), op, ": expected ", backend.dtype_list(kind), what,
           ", got ", dtype);
}

// A defined, contiguous tensor of `shape` and `dtype` on `device`; `name` names the argument.
void check_operand(const Tensor& t, const char* op, const char* name, const Shape& shape,
                   DType dtype, const Device& device) {
  TF_CHECK(t.defined(), op, ": expected a defined ", name, ", got an undefined Tensor");
  TF_CHECK(t.shape() == shape, op, ": expected ", name, " of shape ", shape_str(shape), ", got ",
           shape_str(t.shape()));
  TF_CHECK(t.dtype() == dtype, op, ": expected ", name, " of dtype ", dtype, ", got ", t.dtype());
  check_device(t, op, name, device);
  TF_CHECK(t.is_contiguous(), op, ": expected a contiguous ", name, ", got strides ",
           shape_str(t.strides()));
}

// x: [R, C] of a dtype the backend normalizes, contiguous, on the backend's device.
void check_layer_norm_input(const Tensor& x, Op kind, const char* op, const Backend& backend) {
  TF_CHECK(x.defined(), op, ": expected a defined x, got an undefined Tensor");
  TF_CHECK(x.dim() == 2, op, ": expected x of shape [R, C], got ", shape_str(x.shape()));
  check_supported(kind, x.dtype(), op, backend);
  check_backend_device(x, op, "x", backend);
  check_operand(x, op, "x", x.shape(), x.dtype(), x.device());
}

// mean, rstd: [R] of x's dtype, or float32 for a bfloat16 x (statistics rounded to bfloat16
// would lose the precision the normalization needs, so a backend may keep them in float32).
void check_layer_norm_stats(const Tensor& x, const Tensor& mean, const Tensor& rstd,
                            const char* op) {
  const DType stats =
      x.dtype() == DType::bfloat16 && mean.dtype() == DType::float32 ? DType::float32 : x.dtype();
  check_operand(mean, op, "mean", {x.size(0)}, stats, x.device());
  check_operand(rstd, op, "rstd", {x.size(0)}, stats, x.device());
}

// x: [B, Cin, L], weight: [Cout, Cin, K]; checks both and works out Lout.
ConvShape conv_shape(Op kind, const char* op, const Tensor& x, const Tensor& weight,
                     std::int64_t stride, std::int64_t padding, const Backend& backend) {
  TF_CHECK(x.defined() && weight.defined(), op,
           ": expected defined x and weight, got an undefined Tensor");
  TF_CHECK(x.dim() == 3, op, ": expected x of shape [B, C, L], got ", shape_str(x.shape()));
  TF_CHECK(weight.dim() == 3, op, ": expected weight of shape [Cout, Cin, K], got ",
           shape_str(weight.shape()));
  check_supported(kind, x.dtype(), op, backend);
  check_backend_device(x, op, "x", backend);
  check_operand(x, op, "x", x.shape(), x.dtype(), x.device());
  check_operand(weight, op, "weight", weight.shape(), x.dtype(), x.device());
  TF_CHECK(weight.size(1) == x.size(1), op, ": weight ", shape_str(weight.shape()), " expects ",
           weight.size(1), " input channels, x ", shape_str(x.shape()), " has ", x.size(1));
  TF_CHECK(stride >= 1, op, ": expected stride >= 1, got ", stride);
  TF_CHECK(padding >= 0, op, ": expected padding >= 0, got ", padding);
  TF_CHECK(weight.size(2) >= 1, op, ": expected a kernel of at least 1, got ",
           shape_str(weight.shape()));
  const std::int64_t padded =
      checked_add(x.size(2), checked_mul(2, padding, op, x.shape()), op, x.shape());
  TF_CHECK(padded >= weight.size(2), op, ": the kernel (", weight.size(2),
           ") is longer than the padded input (", padded, ")");
  return {x.size(0),      x.size(1), x.size(2), weight.size(0),
          weight.size(2), stride,    padding,   (padded - weight.size(2)) / stride + 1};
}

// x: [B, C, L]; returns Lout after checking x, kernel and stride. `op` is the kind's name
// (max_pool1d, avg_pool1d_backward).
std::int64_t pool_out_length(const char* op, const Tensor& x, std::int64_t kernel,
                             std::int64_t stride, const Backend& backend) {
  const Op kind = std::string_view(op).ends_with("_backward") ? Op::pool1d_backward : Op::pool1d;
  TF_CHECK(x.defined(), op, ": expected a defined x, got an undefined Tensor");
  TF_CHECK(x.dim() == 3, op, ": expected x of shape [B, C, L], got ", shape_str(x.shape()));
  check_supported(kind, x.dtype(), op, backend);
  check_backend_device(x, op, "x", backend);
  check_operand(x, op, "x", x.shape(), x.dtype(), x.device());
  TF_CHECK(kernel >= 1 && stride >= 1, op, ": expected kernel >= 1 and stride >= 1, got kernel ",
           kernel, " and stride ", stride);
  TF_CHECK(x.size(2) >= kernel, op, ": the kernel (", kernel, ") is longer than the input (",
           x.size(2), ")");
  return (x.size(2) - kernel) / stride + 1;
}

// One of adamw_step's tensors: param's shape and dtype, contiguous, on param's device.
void check_adam_state(const Tensor& t, const Tensor& param, const char* name) {
  const char* op = "adamw_step";
  TF_CHECK(t.defined(), op, ": expected a defined ", name, ", got an undefined Tensor");
  TF_CHECK(t.shape() == param.shape() && t.dtype() == param.dtype(), op, ": expected ", name,
           " of the parameter's ", param.dtype(), " ", shape_str(param.shape()), ", got ",
           t.dtype(), " ", shape_str(t.shape()));
  check_device(t, op, name, param.device());
  TF_CHECK(t.is_contiguous(), op, ": expected a contiguous ", name, ", got strides ",
           shape_str(t.strides()));
}

void check_hyper(bool ok, const char* what, double value, const char* expected) {
  TF_CHECK(ok, "adamw_step: expected ", what, " ", expected, ", got ", value);
}

}  // namespace

void check_same_shape(const char* op, const Tensor& out, std::initializer_list<Tensor> inputs,
                      const Backend& backend) {
  TF_CHECK(out.defined(), op, ": expected a defined output tensor, got an undefined Tensor");
  check_backend_device(out, op, "the output", backend);
  for (const Tensor& t : inputs) {
    TF_CHECK(t.defined(), op, ": expected defined input tensors, got an undefined Tensor");
    TF_CHECK(t.device() == out.device(), op, ": expected inputs on ", out.device(), ", got one on ",
             t.device());
    TF_CHECK(t.shape() == out.shape(), op, ": expected inputs of the output's shape ",
             shape_str(out.shape()), ", got ", shape_str(t.shape()));
  }
}

void check_dtype(const char* op, const char* what, const Tensor& t, DType dtype) {
  TF_CHECK(t.defined(), op, ": expected ", what,
           " to be a defined tensor, got an undefined Tensor");
  TF_CHECK(t.dtype() == dtype, op, ": expected ", what, " of dtype ", dtype, ", got ", t.dtype());
}

// x, out: same shape, any strides, one dtype.
void check_unary_args(UnaryOp op, const Tensor& x, const Tensor& out, const Backend& backend) {
  const char* name = unary_name(op);
  check_same_shape(name, out, {x}, backend);
  TF_CHECK(x.dtype() == out.dtype(), name, ": expected the output's dtype ", out.dtype(),
           ", got input ", x.dtype());
  check_supported(Op::unary, x.dtype(), name, backend);
}

// grad, x or y (whichever op' reads; neither for neg), out: same shape and dtype.
void check_unary_backward_args(UnaryOp op, const Tensor& grad, const Tensor& x, const Tensor& y,
                               const Tensor& out, const Backend& backend) {
  const char* name = unary_name(op);
  const UnaryReads reads = unary_traits(op).reads;
  const bool reads_x = reads == UnaryReads::x, reads_y = reads == UnaryReads::y;
  TF_CHECK(!reads_x || x.defined(), name,
           " backward: expected the input x, got an undefined Tensor");
  TF_CHECK(!reads_y || y.defined(), name,
           " backward: expected the output y, got an undefined Tensor");
  const Tensor& saved = reads_x ? x : y;
  if (reads_x || reads_y) {
    check_same_shape(name, out, {grad, saved}, backend);
    check_dtype(name, reads_x ? "x" : "y", saved, out.dtype());
  } else {
    check_same_shape(name, out, {grad}, backend);
  }
  check_dtype(name, "grad", grad, out.dtype());
  check_supported(Op::unary_backward, out.dtype(), name, backend);
}

// x: any shape and strides; out: x's shape with every dim in `dims` (in range, no repeats) set
// to 1, x's dtype; mean takes floating tensors only.
std::vector<bool> check_reduce_args(ReduceOp op, const Tensor& x, const Shape& dims,
                                    const Tensor& out, const Backend& backend) {
  const char* name = reduce_name(op);
  TF_CHECK(x.defined() && out.defined(), name,
           ": expected defined tensors, got an undefined Tensor");
  check_backend_device(out, name, "the output", backend);
  check_device(x, name, "x", out.device());
  std::vector<bool> reduced(static_cast<std::size_t>(x.dim()), false);
  Shape expected = x.shape();
  for (std::int64_t d : dims) {
    const auto k = static_cast<std::size_t>(normalize_dim(d, x.dim(), name));
    if (x.dim() == 0) continue;  // dim 0 / -1 of a scalar: nothing to reduce
    TF_CHECK(!reduced[k], name, ": dim ", d, " appears more than once in ", shape_str(dims));
    reduced[k] = true;
    expected[k] = 1;
  }
  TF_CHECK(out.shape() == expected, name, ": expected an output of shape ", shape_str(expected),
           " for ", shape_str(x.shape()), " over dims ", shape_str(dims), ", got ",
           shape_str(out.shape()));
  check_dtype(name, "the output", out, x.dtype());
  TF_CHECK(op != ReduceOp::mean || is_floating(x.dtype()), name,
           ": expected a floating tensor, got ", x.dtype());
  check_supported(Op::reduce, x.dtype(), name, backend);
  // An empty reduced dim: the sum of nothing is 0 and its mean NaN; max and min have no value.
  TF_CHECK(out.numel() == 0 || x.numel() > 0 || op == ReduceOp::sum || op == ReduceOp::mean, name,
           ": cannot reduce over an empty dim of shape ", shape_str(x.shape()));
  return reduced;
}

// x: any shape; values (x's dtype), indices (int64): x's shape with `dim` set to 1.
std::int64_t check_max_dim_args(const Tensor& x, std::int64_t dim, const Tensor& values,
                                const Tensor& indices, const Backend& backend) {
  TF_CHECK(x.defined(), "max_dim: expected a defined tensor, got an undefined Tensor");
  const std::int64_t d = normalize_dim(dim, x.dim(), "max_dim");
  Shape kept_shape = x.shape();
  if (x.dim() > 0) kept_shape[static_cast<std::size_t>(d)] = 1;
  TF_CHECK(values.defined() && values.shape() == kept_shape && indices.defined() &&
               indices.shape() == kept_shape,
           "max_dim: expected values and indices of shape ", shape_str(kept_shape), " for ",
           shape_str(x.shape()), " over dim ", dim);
  check_backend_device(values, "max_dim", "values", backend);
  check_device(x, "max_dim", "x", values.device());
  check_device(indices, "max_dim", "indices", values.device());
  check_dtype("max_dim", "values", values, x.dtype());
  check_dtype("max_dim", "indices", indices, DType::int64);
  check_supported(Op::max_dim, x.dtype(), "max_dim", backend);
  return d;
}

// a: [B, M, K], b: [B, K, N] (a batch of 1 broadcasts), out: [B, M, N] (gemm_output), or the
// same with two batch dims [B1, B2, ...] (check_matmul_out4), not sharing memory with a or b; one
// dtype the backend multiplies.
void check_matmul_args(const Tensor& a, const Tensor& b, const Tensor& out,
                       const Backend& backend) {
  TF_CHECK(a.defined() && b.defined() && out.defined(),
           "matmul: expected defined a, b and out, got an undefined Tensor");
  TF_CHECK((out.dim() == 3 || out.dim() == 4) && a.dim() == out.dim() && b.dim() == out.dim(),
           "matmul: expected a [B, M, K], b [B, K, N] and out [B, M, N] (or two batch dims ",
           "[B1, B2, ...] in all three), got ", shape_str(a.shape()), ", ", shape_str(b.shape()),
           " and ", shape_str(out.shape()));
  const std::int64_t m = out.size(-2), n = out.size(-1), k = a.size(-1);
  bool batches_match = true;
  for (std::int64_t d = 0; d + 2 < out.dim(); ++d) {
    batches_match = batches_match && (a.size(d) == out.size(d) || a.size(d) == 1) &&
                    (b.size(d) == out.size(d) || b.size(d) == 1);
  }
  TF_CHECK(batches_match && a.size(-2) == m && b.size(-2) == k && b.size(-1) == n,
           "matmul: shapes do not match: ", shape_str(a.shape()), " @ ", shape_str(b.shape()),
           " into ", shape_str(out.shape()));
  // One dtype, or bfloat16 operands into a float32 out (mixed precision: the float32
  // accumulator is written as it is).
  const bool mixed = a.dtype() == DType::bfloat16 && out.dtype() == DType::float32;
  TF_CHECK(a.dtype() == b.dtype() && (a.dtype() == out.dtype() || mixed) &&
               backend.supports(Op::matmul, a.dtype()),
           "matmul: expected ", backend.dtype_list(Op::matmul),
           " operands of one dtype (bfloat16 operands may write a float32 out), got ", a.dtype(),
           ", ", b.dtype(), " and ", out.dtype());
  check_backend_device(out, "matmul", "out", backend);
  check_device(a, "matmul", "a", out.device());
  check_device(b, "matmul", "b", out.device());
  // Throws for a layout no GEMM writes.
  if (out.dim() == 4) {
    check_matmul_out4(out);
  } else if (out.numel() > 0) {
    gemm_output(out);
  }
  TF_CHECK(out.storage() != a.storage() && out.storage() != b.storage(),
           "matmul: out shares memory with an input");
}

// x: [M, K] with unit column stride and row stride >= K, weight: [N, K] contiguous, bias: [N]
// contiguous or undefined, out: [M, N] contiguous; one dtype the backend multiplies (or bfloat16
// x and weight with a float32 bias and out); out shares no memory with the inputs.
LinearShape check_linear_args(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              Epilogue epilogue, const Tensor& out, const Backend& backend) {
  const char* op = "linear";
  TF_CHECK(x.defined() && weight.defined() && out.defined(), op,
           ": expected defined x, weight and out, got an undefined Tensor");
  TF_CHECK(x.dim() == 2 && weight.dim() == 2 && out.dim() == 2, op,
           ": expected x [M, K], weight [N, K] and out [M, N], got ", shape_str(x.shape()), ", ",
           shape_str(weight.shape()), " and ", shape_str(out.shape()));
  const std::int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
  TF_CHECK(weight.size(1) == k && out.size(0) == m && out.size(1) == n, op,
           ": shapes do not match: x ", shape_str(x.shape()), ", weight ",
           shape_str(weight.shape()), " into ", shape_str(out.shape()));
  check_supported(Op::linear, x.dtype(), op, backend);
  check_backend_device(out, op, "out", backend);
  // One dtype, or bfloat16 x and weight with a float32 bias and out (mixed precision).
  const DType result_dtype =
      x.dtype() == DType::bfloat16 && out.dtype() == DType::float32 ? DType::float32 : x.dtype();
  check_operand(out, op, "out", out.shape(), result_dtype, out.device());
  check_operand(weight, op, "weight", weight.shape(), x.dtype(), out.device());
  check_device(x, op, "x", out.device());
  if (bias.defined()) check_operand(bias, op, "bias", {n}, result_dtype, out.device());
  TF_CHECK(is_epilogue(epilogue), op, ": unknown epilogue ", static_cast<int>(epilogue));
  const bool unit_columns = k <= 1 || x.stride(1) == 1;
  const bool rows_apart = m <= 1 || k == 0 || x.stride(0) >= k;
  TF_CHECK(unit_columns && rows_apart, op,
           ": expected x with unit column stride and a row stride of at least K (", k,
           "), got strides ", shape_str(x.strides()));
  TF_CHECK(out.numel() == 0 || (out.storage() != x.storage() && out.storage() != weight.storage() &&
                                (!bias.defined() || out.storage() != bias.storage())),
           op, ": out shares memory with an input");
  return {m, k, n, m <= 1 || k == 0 ? std::max<std::int64_t>(k, 1) : x.stride(0)};
}

// grad: [M, N] contiguous of a dtype the backend takes; y: grad's shape and dtype, defined exactly
// when the epilogue reads it (relu); grad_z: grad's shape, grad's dtype or (mixed precision) a
// bfloat16 for a float32 grad, or undefined; grad_bias: [N] of grad's dtype or undefined; the
// outputs share no memory with the inputs or with each other.
LinearGradShape check_linear_backward_epilogue_args(const Tensor& grad, const Tensor& y,
                                                    Epilogue epilogue, const Tensor& grad_z,
                                                    const Tensor& grad_bias,
                                                    const Backend& backend) {
  const char* op = "linear_backward_epilogue";
  TF_CHECK(grad.defined(), op, ": expected a defined grad, got an undefined Tensor");
  TF_CHECK(grad.dim() == 2, op, ": expected grad of shape [M, N], got ", shape_str(grad.shape()));
  check_supported(Op::linear_backward_epilogue, grad.dtype(), op, backend);
  check_backend_device(grad, op, "grad", backend);
  check_operand(grad, op, "grad", grad.shape(), grad.dtype(), grad.device());
  TF_CHECK(epilogue == Epilogue::none || epilogue == Epilogue::relu, op,
           ": expected the epilogue none or relu (the gelus' derivatives read the product, which "
           "linear does not keep), got ",
           is_epilogue(epilogue) ? epilogue_name(epilogue) : "an unknown epilogue");
  if (epilogue == Epilogue::relu) {
    TF_CHECK(y.defined(), op, ": expected the layer's output y for relu, got an undefined Tensor");
    check_operand(y, op, "y", grad.shape(), grad.dtype(), grad.device());
  } else {
    TF_CHECK(!y.defined(), op, ": expected no y for the epilogue none, got one");
  }
  const std::int64_t m = grad.size(0), n = grad.size(1);
  if (grad_z.defined()) {
    const bool mixed = grad.dtype() == DType::float32 && grad_z.dtype() == DType::bfloat16;
    check_operand(grad_z, op, "grad_z", grad.shape(), mixed ? DType::bfloat16 : grad.dtype(),
                  grad.device());
  }
  if (grad_bias.defined()) {
    check_operand(grad_bias, op, "grad_bias", {n}, grad.dtype(), grad.device());
  }
  const auto apart = [](const Tensor& out, const Tensor& other) {
    return !out.defined() || !other.defined() || out.numel() == 0 || other.numel() == 0 ||
           out.storage() != other.storage();
  };
  for (const Tensor* out : {&grad_z, &grad_bias}) {
    TF_CHECK(apart(*out, grad) && apart(*out, y), op, ": ", out == &grad_z ? "grad_z" : "grad_bias",
             " shares memory with an input");
  }
  TF_CHECK(apart(grad_z, grad_bias), op, ": grad_z and grad_bias share memory");
  return {m, n};
}

namespace {

// Whether no two elements of t share an address: with its dims ordered by stride, each stride
// reaches past everything the smaller ones span.
bool elements_apart(const Tensor& t) {
  std::vector<std::pair<std::int64_t, std::int64_t>> dims;  // {stride, size}
  for (std::int64_t i = 0; i < t.dim(); ++i) {
    if (t.size(i) == 0) return true;
    if (t.size(i) > 1) dims.emplace_back(t.stride(i), t.size(i));
  }
  std::sort(dims.begin(), dims.end());
  std::int64_t span = 1;  // elements from the first to the last reached so far, inclusive
  for (const auto& [stride, size] : dims) {
    if (stride < span) return false;
    span += stride * (size - 1);
  }
  return true;
}

// One matrix operand of attention: [batch..., rows, cols] of `dtype` on `device`, with a unit
// stride along cols and a row stride of at least cols; an output must not reach one element twice.
void check_attention_matrix(const Tensor& t, const char* op, const char* name, const Shape& batch,
                            std::int64_t rows, std::int64_t cols, DType dtype, const Device& device,
                            bool output) {
  TF_CHECK(t.defined(), op, ": expected a defined ", name, ", got an undefined Tensor");
  Shape want = batch;
  want.push_back(rows);
  want.push_back(cols);
  TF_CHECK(t.shape() == want, op, ": expected ", name, " of shape ", shape_str(want), ", got ",
           shape_str(t.shape()));
  TF_CHECK(t.dtype() == dtype, op, ": expected ", name, " of dtype ", dtype, ", got ", t.dtype());
  check_device(t, op, name, device);
  const bool unit = cols <= 1 || t.stride(-1) == 1;
  const bool rows_apart = rows <= 1 || t.stride(-2) >= cols;
  TF_CHECK(unit && rows_apart, op, ": expected ", name,
           " with a unit stride along its last dim and a row stride of at least ", cols,
           ", got strides ", shape_str(t.strides()));
  TF_CHECK(!output || elements_apart(t), op, ": expected ", name,
           " whose elements do not overlap, got shape ", shape_str(t.shape()), " with strides ",
           shape_str(t.strides()));
}

// Outputs share no memory with each other or with the inputs (empty tensors aside).
void check_attention_apart(const char* op,
                           std::initializer_list<std::pair<const Tensor*, const char*>> outputs,
                           std::initializer_list<const Tensor*> inputs) {
  const auto apart = [](const Tensor& a, const Tensor& b) {
    return !a.defined() || !b.defined() || a.numel() == 0 || b.numel() == 0 ||
           a.storage() != b.storage();
  };
  for (auto o = outputs.begin(); o != outputs.end(); ++o) {
    for (const Tensor* in : inputs) {
      TF_CHECK(apart(*o->first, *in), op, ": ", o->second, " shares memory with an input");
    }
    for (auto p = outputs.begin(); p != o; ++p) {
      TF_CHECK(apart(*o->first, *p->first), op, ": ", p->second, " and ", o->second,
               " share memory");
    }
  }
}

// query, key and value of attention's call; returns the shape.
AttentionShape check_attention_operands(const char* op, Op kind, const Tensor& query,
                                        const Tensor& key, const Tensor& value, double scale,
                                        const Backend& backend) {
  TF_CHECK(query.defined() && key.defined() && value.defined(), op,
           ": expected defined query, key and value, got an undefined Tensor");
  TF_CHECK(query.dim() >= 2 && key.dim() == query.dim() && value.dim() == query.dim(), op,
           ": expected query [..., n, d], key [..., m, d] and value [..., m, dv] with the same "
           "number of dims (>= 2), got ",
           shape_str(query.shape()), ", ", shape_str(key.shape()), ", ", shape_str(value.shape()));
  check_supported(kind, query.dtype(), op, backend);
  check_backend_device(query, op, "query", backend);
  AttentionShape s;
  s.batch = Shape(query.shape().begin(), query.shape().end() - 2);
  s.batches = 1;
  for (std::int64_t b : s.batch) s.batches *= b;
  s.n = query.size(-2);
  s.d = query.size(-1);
  s.m = key.size(-2);
  s.dv = value.size(-1);
  const DType dtype = query.dtype();
  const Device device = query.device();
  check_attention_matrix(query, op, "query", s.batch, s.n, s.d, dtype, device, false);
  check_attention_matrix(key, op, "key", s.batch, s.m, s.d, dtype, device, false);
  check_attention_matrix(value, op, "value", s.batch, s.m, s.dv, dtype, device, false);
  TF_CHECK(std::isfinite(scale), op, ": expected a finite scale, got ", scale);
  return s;
}

}  // namespace

AttentionShape check_attention_args(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& excluded_mask, bool causal, double scale,
                                    const Tensor& probs, const Tensor& out,
                                    const Backend& backend) {
  (void)causal;
  const char* op = "attention";
  const AttentionShape s =
      check_attention_operands(op, Op::attention, query, key, value, scale, backend);
  Shape scores = s.batch;
  scores.push_back(s.n);
  scores.push_back(s.m);
  if (excluded_mask.defined()) {
    TF_CHECK(excluded_mask.dtype() == DType::boolean && excluded_mask.shape() == scores, op,
             ": expected excluded_mask of dtype bool and shape ", shape_str(scores),
             " (a broadcast mask expanded to the scores), got ", excluded_mask.dtype(), " ",
             shape_str(excluded_mask.shape()));
    check_device(excluded_mask, op, "excluded_mask", query.device());
  }
  check_operand(probs, op, "probs", scores, query.dtype(), query.device());
  check_attention_matrix(out, op, "out", s.batch, s.n, s.dv, query.dtype(), query.device(), true);
  check_attention_apart(op, {{&probs, "probs"}, {&out, "out"}},
                        {&query, &key, &value, &excluded_mask});
  return s;
}

AttentionShape check_attention_backward_args(const Tensor& grad, const Tensor& query,
                                             const Tensor& key, const Tensor& value,
                                             const Tensor& probs, double scale,
                                             const Tensor& grad_query, const Tensor& grad_key,
                                             const Tensor& grad_value, const Backend& backend) {
  const char* op = "attention_backward";
  const AttentionShape s =
      check_attention_operands(op, Op::attention_backward, query, key, value, scale, backend);
  const DType dtype = query.dtype();
  const Device device = query.device();
  check_attention_matrix(grad, op, "grad", s.batch, s.n, s.dv, dtype, device, false);
  Shape scores = s.batch;
  scores.push_back(s.n);
  scores.push_back(s.m);
  check_operand(probs, op, "probs", scores, dtype, device);
  check_attention_matrix(grad_query, op, "grad_query", s.batch, s.n, s.d, dtype, device, true);
  check_attention_matrix(grad_key, op, "grad_key", s.batch, s.m, s.d, dtype, device, true);
  check_attention_matrix(grad_value, op, "grad_value", s.batch, s.m, s.dv, dtype, device, true);
  check_attention_apart(
      op, {{&grad_query, "grad_query"}, {&grad_key, "grad_key"}, {&grad_value, "grad_value"}},
      {&grad, &query, &key, &value, &probs});
  return s;
}

namespace {
void check_excluded_mask(const char* op, const Tensor& excluded_mask, const AttentionShape& s,
                         Device device) {
  if (!excluded_mask.defined()) return;
  Shape scores = s.batch;
  scores.push_back(s.n);
  scores.push_back(s.m);
  TF_CHECK(excluded_mask.dtype() == DType::boolean && excluded_mask.shape() == scores, op,
           ": expected excluded_mask of dtype bool and shape ", shape_str(scores),
           " (a broadcast mask expanded to the scores), got ", excluded_mask.dtype(), " ",
           shape_str(excluded_mask.shape()));
  check_device(excluded_mask, op, "excluded_mask", device);
}

void check_lse(const char* op, const Tensor& lse, const AttentionShape& s, DType dtype,
               Device device) {
  Shape rows = s.batch;
  rows.push_back(s.n);
  check_operand(lse, op, "lse", rows, dtype, device);
}

void check_dropout(const char* op, const AttentionDropout& dropout) {
  TF_CHECK(dropout.p >= 0.0 && dropout.p <= 1.0, op,
           ": expected a dropout probability in [0, 1], got ", dropout.p);
}
}  // namespace

AttentionShape check_flash_attention_args(const Tensor& query, const Tensor& key,
                                          const Tensor& value, const Tensor& excluded_mask,
                                          double scale, const AttentionDropout& dropout,
                                          const Tensor& out, const Tensor& lse,
                                          const Backend& backend) {
  const char* op = "flash_attention";
  const AttentionShape s =
      check_attention_operands(op, Op::flash_attention, query, key, value, scale, backend);
  check_excluded_mask(op, excluded_mask, s, query.device());
  check_dropout(op, dropout);
  check_attention_matrix(out, op, "out", s.batch, s.n, s.dv, query.dtype(), query.device(), true);
  check_lse(op, lse, s, query.dtype(), query.device());
  check_attention_apart(op, {{&out, "out"}, {&lse, "lse"}}, {&query, &key, &value, &excluded_mask});
  return s;
}

AttentionShape check_flash_attention_backward_args(
    const Tensor& grad, const Tensor& query, const Tensor& key, const Tensor& value,
    const Tensor& out, const Tensor& lse, const Tensor& excluded_mask, double scale,
    const AttentionDropout& dropout, const Tensor& grad_query, const Tensor& grad_key,
    const Tensor& grad_value, const Backend& backend) {
  const char* op = "flash_attention_backward";
  const AttentionShape s =
      check_attention_operands(op, Op::flash_attention_backward, query, key, value, scale, backend);
  const DType dtype = query.dtype();
  const Device device = query.device();
  check_excluded_mask(op, excluded_mask, s, device);
  check_dropout(op, dropout);
  check_attention_matrix(grad, op, "grad", s.batch, s.n, s.dv, dtype, device, false);
  check_attention_matrix(out, op, "out", s.batch, s.n, s.dv, dtype, device, false);
  check_lse(op, lse, s, dtype, device);
  check_attention_matrix(grad_query, op, "grad_query", s.batch, s.n, s.d, dtype, device, true);
  check_attention_matrix(grad_key, op, "grad_key", s.batch, s.m, s.d, dtype, device, true);
  check_attention_matrix(grad_value, op, "grad_value", s.batch, s.m, s.dv, dtype, device, true);
  check_attention_apart(
      op, {{&grad_query, "grad_query"}, {&grad_key, "grad_key"}, {&grad_value, "grad_value"}},
      {&grad, &query, &key, &value, &out, &lse, &excluded_mask});
  return s;
}

std::vector<std::int64_t> batch_offsets(const Tensor& t, const Shape& batch) {
  std::int64_t count = 1;
  for (std::int64_t b : batch) count *= b;
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(count), 0);
  const std::int64_t dims = static_cast<std::int64_t>(batch.size());
  for (std::int64_t i = 0; i < count; ++i) {
    std::int64_t rest = i, offset = 0;
    for (std::int64_t d = dims - 1; d >= 0; --d) {
      const std::int64_t size = batch[static_cast<std::size_t>(d)];
      offset += (rest % size) * t.stride(d);
      rest /= size;
    }
    offsets[static_cast<std::size_t>(i)] = offset;
  }
  return offsets;
}

// Every tensor must be a contiguous [R, C] of the first one's shape and one dtype the backend
// normalizes, on the device of the last one (the output).
void check_softmax_args(const char* op, std::initializer_list<const Tensor*> tensors,
                        const Backend& backend) {
  const bool backward = std::string_view(op).ends_with("_backward");
  const Op kind = backward ? Op::softmax_backward : Op::softmax;
  const Tensor& first = **tensors.begin();
  const Tensor& out = **(tensors.end() - 1);
  // The tensor whose dtype the op computes in: x forward, grad backward ({y, grad, out}).
  const Tensor& compute = backward && tensors.size() == 3 ? **(tensors.begin() + 1) : first;
  TF_CHECK(out.defined(), op, ": expected defined tensors, got an undefined Tensor");
  check_backend_device(out, op, "the output", backend);
  for (const Tensor* t : tensors) {
    TF_CHECK(t->defined(), op, ": expected defined tensors, got an undefined Tensor");
  }
  const DType dtype = compute.dtype();
  TF_CHECK(backend.supports(kind, dtype), op, ": expected ", backend.dtype_list(kind),
           " tensors, got ", dtype);
  for (const Tensor* t : tensors) {
    TF_CHECK(t->dim() == 2, op, ": expected [R, C] tensors, got shape ", shape_str(t->shape()));
    TF_CHECK(t->shape() == first.shape(), op, ": shapes differ: ", shape_str(first.shape()),
             " and ", shape_str(t->shape()));
    // Mixed precision: y and out may be bfloat16 around a float32 computation.
    const bool mixed = t != &compute && dtype == DType::float32 && t->dtype() == DType::bfloat16;
    TF_CHECK(t->dtype() == dtype || mixed, op, ": expected tensors of one dtype (or a bfloat16 ",
             backward ? "y or out" : "out", " with float32 ", backward ? "grad" : "x", "), got ",
             dtype, " and ", t->dtype());
    TF_CHECK(t->device() == out.device(), op, ": expected tensors on ", out.device(),
             ", got one on ", t->device());
    TF_CHECK(t->is_contiguous(), op, ": expected contiguous tensors, got strides ",
             shape_str(t->strides()), " for shape ", shape_str(t->shape()));
  }
}

namespace {

// layer_norm's and add_layer_norm's x (checked already), out, statistics, parameters and eps.
void check_layer_norm_rest(const char* op, const Tensor& x, const Tensor& weight,
                           const Tensor& bias, double eps, const Tensor& out, const Tensor& mean,
                           const Tensor& rstd) {
  const std::int64_t rows = x.size(0), cols = x.size(1);
  const Device device = x.device();
  TF_CHECK(out.defined() && mean.defined() && rstd.defined(), op,
           ": expected defined out, mean and rstd, got an undefined Tensor");
  check_operand(out, op, "out", x.shape(), x.dtype(), device);
  check_layer_norm_stats(x, mean, rstd, op);
  if (weight.defined()) check_operand(weight, op, "weight", {cols}, x.dtype(), device);
  if (bias.defined()) check_operand(bias, op, "bias", {cols}, x.dtype(), device);
  TF_CHECK(eps >= 0, op, ": expected eps >= 0, got ", eps);
  if (rows == 0) return;
  TF_CHECK(cols > 0, op, ": cannot normalize rows of 0 elements (x ", shape_str(x.shape()), ")");
}

}  // namespace

// x, out: [R, C]; weight, bias: [C] or undefined; mean, rstd: [R]; eps >= 0; rows of at least
// one element unless there are no rows.
void check_layer_norm_args(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                           const Tensor& out, const Tensor& mean, const Tensor& rstd,
                           const Backend& backend) {
  check_layer_norm_input(x, Op::layer_norm, "layer_norm", backend);
  check_layer_norm_rest("layer_norm", x, weight, bias, eps, out, mean, rstd);
}

// As check_layer_norm_args, with residual and sum of x's shape, dtype and device.
void check_add_layer_norm_args(const Tensor& x, const Tensor& residual, const Tensor& weight,
                               const Tensor& bias, double eps, const Tensor& out, const Tensor& sum,
                               const Tensor& mean, const Tensor& rstd, const Backend& backend) {
  const char* op = "add_layer_norm";
  check_layer_norm_input(x, Op::add_layer_norm, op, backend);
  TF_CHECK(residual.defined() && sum.defined(), op,
           ": expected defined residual and sum, got an undefined Tensor");
  check_operand(residual, op, "residual", x.shape(), x.dtype(), x.device());
  check_operand(sum, op, "sum", x.shape(), x.dtype(), x.device());
  check_layer_norm_rest(op, x, weight, bias, eps, out, mean, rstd);
}

// grad, x, grad_x: [R, C]; weight: [C] or undefined; mean, rstd: [R];
// grad_x, grad_weight, grad_bias: undefined when not wanted.
void check_layer_norm_backward_args(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                    const Tensor& mean, const Tensor& rstd, const Tensor& grad_x,
                                    const Tensor& grad_weight, const Tensor& grad_bias,
                                    const Backend& backend) {
  const char* op = "layer_norm_backward";
  check_layer_norm_input(x, Op::layer_norm_backward, op, backend);
  const std::int64_t cols = x.size(1);
  const Device device = x.device();
  TF_CHECK(grad.defined() && mean.defined() && rstd.defined(), op,
           ": expected defined grad, mean and rstd, got an undefined Tensor");
  check_operand(grad, op, "grad", x.shape(), x.dtype(), device);
  check_layer_norm_stats(x, mean, rstd, op);
  if (weight.defined()) check_operand(weight, op, "weight", {cols}, x.dtype(), device);
  if (grad_x.defined()) check_operand(grad_x, op, "grad_x", x.shape(), x.dtype(), device);
  if (grad_weight.defined()) {
    check_operand(grad_weight, op, "grad_weight", {cols}, x.dtype(), device);
  }
  if (grad_bias.defined()) check_operand(grad_bias, op, "grad_bias", {cols}, x.dtype(), device);
}

// x: [B, Cin, L], weight: [Cout, Cin, K], bias: [Cout] or undefined, out: [B, Cout, Lout]
ConvShape check_conv1d_args(const Tensor& x, const Tensor& weight, const Tensor& bias,
                            std::int64_t stride, std::int64_t padding, const Tensor& out,
                            const Backend& backend) {
  const char* op = "conv1d";
  const ConvShape s = conv_shape(Op::conv1d, op, x, weight, stride, padding, backend);
  if (bias.defined()) check_operand(bias, op, "bias", {s.c_out}, x.dtype(), x.device());
  TF_CHECK(out.defined(), op, ": expected a defined out, got an undefined Tensor");
  check_operand(out, op, "out", {s.batch, s.c_out, s.out_length}, x.dtype(), x.device());
  return s;
}

// grad: [B, Cout, Lout]; x, weight as in the forward; grad_x: [B, Cin, L],
// grad_weight: [Cout, Cin, K], grad_bias: [Cout], each undefined when not wanted.
ConvShape check_conv1d_backward_args(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                     std::int64_t stride, std::int64_t padding,
                                     const Tensor& grad_x, const Tensor& grad_weight,
                                     const Tensor& grad_bias, const Backend& backend) {
  const char* op = "conv1d_backward";
  const ConvShape s = conv_shape(Op::conv1d_backward, op, x, weight, stride, padding, backend);
  const DType dtype = x.dtype();
  const Device device = x.device();
  TF_CHECK(grad.defined(), op, ": expected a defined grad, got an undefined Tensor");
  check_operand(grad, op, "grad", {s.batch, s.c_out, s.out_length}, dtype, device);
  if (grad_x.defined()) check_operand(grad_x, op, "grad_x", x.shape(), dtype, device);
  if (grad_weight.defined()) {
    check_operand(grad_weight, op, "grad_weight", weight.shape(), dtype, device);
  }
  if (grad_bias.defined()) check_operand(grad_bias, op, "grad_bias", {s.c_out}, dtype, device);
  return s;
}

// x: [B, C, L], out: [B, C, Lout]
std::int64_t check_pool1d_args(const char* op, const Tensor& x, std::int64_t kernel,
                               std::int64_t stride, const Tensor& out, const Backend& backend) {
  const std::int64_t out_length = pool_out_length(op, x, kernel, stride, backend);
  check_operand(out, op, "out", {x.size(0), x.size(1), out_length}, x.dtype(), x.device());
  return out_length;
}

// grad: [B, C, Lout], x: [B, C, L] (the forward's input), grad_x: [B, C, L]
std::int64_t check_pool1d_backward_args(const char* op, const Tensor& grad, const Tensor& x,
                                        std::int64_t kernel, std::int64_t stride,
                                        const Tensor& grad_x, const Backend& backend) {
  const std::int64_t out_length = pool_out_length(op, x, kernel, stride, backend);
  check_operand(grad, op, "grad", {x.size(0), x.size(1), out_length}, x.dtype(), x.device());
  check_operand(grad_x, op, "grad_x", x.shape(), x.dtype(), x.device());
  return out_length;
}

// x: a dtype the backend sums, contiguous, on the backend's device; out: one float64 element
// on x's device.
void check_sum_squares_args(const Tensor& x, const Tensor& out, const Backend& backend) {
  TF_CHECK(x.defined(), "sum_squares: expected a defined x, got an undefined Tensor");
  check_supported(Op::sum_squares, x.dtype(), "sum_squares", backend, " x");
  check_backend_device(x, "sum_squares", "x", backend);
  TF_CHECK(x.is_contiguous(), "sum_squares: expected a contiguous x, got shape ",
           shape_str(x.shape()), " with strides ", shape_str(x.strides()));
  TF_CHECK(out.defined(), "sum_squares: expected a defined out, got an undefined Tensor");
  TF_CHECK(out.dtype() == DType::float64 && out.numel() == 1,
           "sum_squares: expected out of one float64 element, got ", out.dtype(), " ",
           shape_str(out.shape()));
  check_device(out, "sum_squares", "out", x.device());
}

// param, grad, exp_avg, exp_avg_sq: one shape, a dtype the backend updates, contiguous, no two
// sharing memory; the scalars in the ranges of core/ops.def.
void check_adamw_step_args(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                           const Tensor& exp_avg_sq, double lr, double beta1, double beta2,
                           double eps, double weight_decay, double bias_correction1,
                           double bias_correction2, const Backend& backend) {
  TF_CHECK(param.defined(), "adamw_step: expected a defined param, got an undefined Tensor");
  check_supported(Op::adamw_step, param.dtype(), "adamw_step", backend, " param");
  check_backend_device(param, "adamw_step", "param", backend);
  check_adam_state(param, param, "param");
  check_adam_state(grad, param, "grad");
  check_adam_state(exp_avg, param, "exp_avg");
  check_adam_state(exp_avg_sq, param, "exp_avg_sq");
  check_hyper(std::isfinite(lr) && lr >= 0.0, "lr", lr, ">= 0");
  check_hyper(beta1 >= 0.0 && beta1 < 1.0, "beta1", beta1, "in [0, 1)");
  check_hyper(beta2 >= 0.0 && beta2 < 1.0, "beta2", beta2, "in [0, 1)");
  check_hyper(std::isfinite(eps) && eps >= 0.0, "eps", eps, ">= 0");
  check_hyper(std::isfinite(weight_decay) && weight_decay >= 0.0, "weight_decay", weight_decay,
              ">= 0");
  check_hyper(bias_correction1 > 0.0 && bias_correction1 <= 1.0, "bias_correction1",
              bias_correction1, "in (0, 1]");
  check_hyper(bias_correction2 > 0.0 && bias_correction2 <= 1.0, "bias_correction2",
              bias_correction2, "in (0, 1]");
  if (param.numel() == 0) return;
  // The update reads and writes the four tensors element by element; two sharing memory would
  // read values already overwritten.
  const Tensor* all[] = {&param, &grad, &exp_avg, &exp_avg_sq};
  for (int i = 0; i < 4; ++i) {
    for (int j = i + 1; j < 4; ++j) {
      TF_CHECK(all[i]->storage() != all[j]->storage(),
               "adamw_step: param, grad, exp_avg and exp_avg_sq must not share memory");
    }
  }
}

// --- indexing and losses ---

namespace {

// A defined 2-d tensor on `device`; `what` names it.
void check_matrix(const Tensor& t, const char* op, const char* what, const Device& device) {
  TF_CHECK(t.defined() && t.dim() == 2, op, ": expected ", what, " to be a 2-d tensor, got ",
           t.defined() ? shape_str(t.shape()) : "an undefined Tensor");
  check_device(t, op, what, device);
}

// A defined 1-d int64 tensor of `rows` elements (any rows when negative) on `device`.
void check_index_vector(const Tensor& t, const char* op, const char* what, std::int64_t rows,
                        const Device& device) {
  TF_CHECK(t.defined(), op, ": expected ", what,
           " to be a defined tensor, got an undefined Tensor");
  check_dtype(op, what, t, DType::int64);
  TF_CHECK(t.dim() == 1 && (rows < 0 || t.size(0) == rows), op, ": expected ", what, " of shape [",
           rows < 0 ? std::string("N") : std::to_string(rows), "], got ", shape_str(t.shape()));
  check_device(t, op, what, device);
}

}  // namespace

void check_index_select_args(const Tensor& table, const Tensor& indices, const Tensor& out,
                             const Backend& backend) {
  const char* op = "index_select";
  TF_CHECK(out.defined(), op, ": expected a defined output, got an undefined Tensor");
  check_backend_device(out, op, "the output", backend);
  check_matrix(table, op, "the table", out.device());
  check_matrix(out, op, "the output", out.device());
  check_index_vector(indices, op, "indices", -1, out.device());
  const std::int64_t n = indices.size(0), d = table.size(1);
  TF_CHECK(out.size(0) == n && out.size(1) == d, op, ": expected an output of shape ",
           shape_str({n, d}), ", got ", shape_str(out.shape()));
  check_dtype(op, "the output", out, table.dtype());
  check_supported(Op::index_select, table.dtype(), op, backend);
}

void check_index_add_args(const Tensor& src, const Tensor& indices, const Tensor& out,
                          const Backend& backend) {
  const char* op = "index_add";
  TF_CHECK(out.defined(), op, ": expected a defined output, got an undefined Tensor");
  check_backend_device(out, op, "the output", backend);
  check_matrix(src, op, "the source", out.device());
  check_matrix(out, op, "the output", out.device());
  TF_CHECK(out.is_contiguous(), op, ": expected a contiguous output");
  check_index_vector(indices, op, "indices", -1, out.device());
  const std::int64_t n = indices.size(0), d = out.size(1);
  TF_CHECK(src.size(0) == n && src.size(1) == d, op, ": expected a source of shape ",
           shape_str({n, d}), " for ", n, " indices into ", shape_str(out.shape()), ", got ",
           shape_str(src.shape()));
  check_dtype(op, "the output", out, src.dtype());
  check_supported(Op::index_add, src.dtype(), op, backend);
}

void check_nll_loss_args(const Tensor& log_probs, const Tensor& target, const Tensor& loss,
                         const Backend& backend) {
  const char* op = "nll_loss";
  TF_CHECK(log_probs.defined() && log_probs.dim() == 2 && log_probs.is_contiguous(), op,
           ": expected contiguous log-probabilities [N, C], got ",
           log_probs.defined() ? shape_str(log_probs.shape()) : "an undefined Tensor");
  check_backend_device(log_probs, op, "the log-probabilities", backend);
  const std::int64_t n = log_probs.size(0);
  TF_CHECK(loss.defined() && loss.shape() == Shape{n}, op, ": expected a loss of shape [", n,
           "], got ", loss.defined() ? shape_str(loss.shape()) : "an undefined Tensor");
  check_dtype(op, "the loss", loss, log_probs.dtype());
  check_device(loss, op, "the loss", log_probs.device());
  check_supported(Op::nll_loss, log_probs.dtype(), op, backend);
  check_index_vector(target, op, "the target", n, log_probs.device());
}

void check_nll_loss_backward_args(const Tensor& grad_loss, const Tensor& target, const Tensor& out,
                                  const Backend& backend) {
  const char* op = "nll_loss_backward";
  TF_CHECK(out.defined() && out.dim() == 2 && out.is_contiguous(), op,
           ": expected a contiguous output [N, C], got ",
           out.defined() ? shape_str(out.shape()) : "an undefined Tensor");
  check_backend_device(out, op, "the output", backend);
  const std::int64_t n = out.size(0);
  TF_CHECK(grad_loss.defined() && grad_loss.shape() == Shape{n}, op,
           ": expected a gradient of shape [", n, "], got ",
           grad_loss.defined() ? shape_str(grad_loss.shape()) : "an undefined Tensor");
  check_dtype(op, "the gradient", grad_loss, out.dtype());
  check_device(grad_loss, op, "the gradient", out.device());
  check_supported(Op::nll_loss_backward, out.dtype(), op, backend);
  check_index_vector(target, op, "the target", n, out.device());
}

void fail_index_out_of_range(const char* op, std::int64_t value, std::int64_t position,
                             std::int64_t rows) {
  throw IndexOutOfRange(
      detail::concat(op, ": index ", value, " at position ", position, " is out of range for ",
                     rows, " rows (expected 0 <= index < ", rows, ")"),
      value, position, rows);
}

void fail_target_out_of_range(const char* op, std::int64_t value, std::int64_t row,
                              std::int64_t classes, std::int64_t ignore_index) {
  fail(op, ": target ", value, " of row ", row, " is out of range for ", classes,
       " classes (expected 0 <= target < ", classes, " or the ignore_index ", ignore_index, ")");
}

void check_index_values_in_host_memory(const char* op, const Tensor& indices, std::int64_t rows) {
  const auto* idx = static_cast<const std::int64_t*>(indices.data_ptr());
  for (std::int64_t i = 0; i < indices.size(0); ++i) {
    const std::int64_t v = idx[i * indices.stride(0)];
    if (v < 0 || v >= rows) fail_index_out_of_range(op, v, i, rows);
  }
}

void check_target_values_in_host_memory(const char* op, const Tensor& target, std::int64_t classes,
                                        std::int64_t ignore_index) {
  const auto* t = static_cast<const std::int64_t*>(target.data_ptr());
  for (std::int64_t i = 0; i < target.size(0); ++i) {
    const std::int64_t c = t[i * target.stride(0)];
    if (c != ignore_index && (c < 0 || c >= classes)) {
      fail_target_out_of_range(op, c, i, classes, ignore_index);
    }
  }
}

void check_scaled_bernoulli_args(double a, double b) {
  TF_CHECK(a >= 0 && a <= 1, "random: scaled_bernoulli expects a probability a in [0, 1], got ", a);
  TF_CHECK(std::isfinite(b), "random: scaled_bernoulli expects a finite value b, got ", b);
}

}  // namespace tinyformer
