// CpuBackend::linear: out = act(x W^T + b), a linear layer's product with its bias and activation
// applied while each output tile is still in cache, instead of in passes over the whole output.
// Which library runs what (docs/matmul.md):
//   float32: one oneDNN matmul primitive, W^T described by its strides (no copy), b as the
//     primitive's bias argument and the activation as an eltwise post-op (eltwise_relu,
//     eltwise_gelu_erf, eltwise_gelu_tanh); cached by shape and attributes like matmul's;
//   float32 under set_matmul_precision(bf16), above the small-product size and where the CPU has
//     bfloat16 instructions: x and W rounded to bfloat16 once each, the same primitive with a
//     float32 bias and result (as matmul does);
//   bfloat16: the same primitive on bfloat16 operands with float32 accumulation where oneDNN has
//     a bfloat16 kernel for this CPU (bf16_matmul_native), else the float32 path on the widened
//     operands, rounded once at the end;
//   bfloat16 x and W into a float32 bias and out (mixed precision): the same primitive, whose
//     float32 accumulator is written as it is;
//   float64 (oneDNN has no float64 matmul): cblas_dgemm, then one loop that adds the bias and
//     applies the activation with the shared math of core/unary_math.h.
// CpuBackend::linear_backward_epilogue: the backward of the bias and activation in one pass over
// the output's gradient, which writes the product's gradient (rounded to bfloat16 in mixed
// precision, for the backward's two products) and sums its columns into the bias gradient.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dnnl_context.h"
#include "backends/cpu/matmul.h"
#include "backends/cpu/strided.h"
#include "core/bfloat16.h"
#include "core/error.h"
#include "core/op_checks.h"
#include "core/unary_math.h"

namespace tinyformer::cpu {

namespace {

// x's row stride as a GEMM's leading dimension (any value >= K serves a single row).
std::int64_t row_stride(const Tensor& x) {
  return x.size(0) <= 1 || x.size(1) == 0 ? std::max<std::int64_t>(x.size(1), 1) : x.stride(0);
}

dnnl::memory::desc desc(const Shape& dims, const Shape& strides, DType dtype) {
  return dnnl::memory::desc(
      dnnl::memory::dims(dims.begin(), dims.end()),
      dtype == DType::bfloat16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32,
      dnnl::memory::dims(strides.begin(), strides.end()));
}

dnnl::algorithm eltwise_algorithm(Epilogue epilogue) {
  switch (epilogue) {
    case Epilogue::relu:
      return dnnl::algorithm::eltwise_relu;
    case Epilogue::gelu:
      return dnnl::algorithm::eltwise_gelu_erf;
    case Epilogue::gelu_tanh:
      return dnnl::algorithm::eltwise_gelu_tanh;
    case Epilogue::none:
      break;
  }
  return dnnl::algorithm::undef;
}

// x: [M, K] (row stride ld), weight: [N, K] contiguous, bias: [N] or undefined, out: [M, N]
// contiguous; x and weight float32 or bfloat16 (one dtype), bias and out float32 or bfloat16.
void linear_dnnl(const Tensor& x, const Tensor& weight, const Tensor& bias, Epilogue epilogue,
                 const Tensor& out) {
  const std::int64_t m = x.size(0), k = x.size(1), n = weight.size(0), ld = row_stride(x);
  const auto x_desc = desc({m, k}, {ld, 1}, x.dtype());
  const auto w_desc = desc({k, n}, {1, k}, weight.dtype());  // W^T: element (q, j) is W[j, q]
  const auto out_desc = desc({m, n}, {n, 1}, out.dtype());
  const auto bias_desc = bias.defined() ? desc({1, n}, {n, 1}, bias.dtype()) : dnnl::memory::desc();
  PrimitiveKey key("linear");
  key.add(static_cast<std::int64_t>(x.dtype())).add(static_cast<std::int64_t>(out.dtype()));
  key.add(bias.defined() ? static_cast<std::int64_t>(bias.dtype()) : -1);
  key.add(static_cast<std::int64_t>(epilogue)).add(m).add(k).add(n).add(ld);
  const std::int64_t work = m * n * k;
  const CachedPrimitive p = cached_primitive(
      key,
      [&] {
        dnnl::primitive_attr attr = dnnl_attr();
        if (epilogue != Epilogue::none) {
          dnnl::post_ops ops;
          ops.append_eltwise(1.0f, eltwise_algorithm(epilogue), 0.0f, 0.0f);
          attr.set_post_ops(ops);
        }
        const dnnl::matmul::desc d = bias.defined()
                                         ? dnnl::matmul::desc(x_desc, w_desc, bias_desc, out_desc)
                                         : dnnl::matmul::desc(x_desc, w_desc, out_desc);
        dnnl::matmul::primitive_desc pd(d, attr, dnnl_engine());
        return CachedPrimitive{dnnl::matmul(pd), pd};
      },
      dnnl_threads(work));
  auto& engine = dnnl_engine();
  std::unordered_map<int, dnnl::memory> args = {
      {DNNL_ARG_SRC, dnnl::memory(x_desc, engine, x.data_ptr())},
      {DNNL_ARG_WEIGHTS, dnnl::memory(w_desc, engine, weight.data_ptr())},
      {DNNL_ARG_DST, dnnl_memory(out_desc, out)}};
  if (bias.defined()) args.emplace(DNNL_ARG_BIAS, dnnl::memory(bias_desc, engine, bias.data_ptr()));
  dnnl_execute(p, std::move(args), "linear", dnnl_threads(work));
}

// out[i, j] = act(out[i, j] + bias[j]) over [M, N] contiguous; bias may be null.
template <typename T>
void add_bias_and_activate(T* out, const T* bias, std::int64_t m, std::int64_t n,
                           Epilogue epilogue) {
  if (bias == nullptr && epilogue == Epilogue::none) return;
  visit_epilogue<T>(epilogue, [&](auto math) {
    parallel_for(
        m,
        [&](std::int64_t begin, std::int64_t end) {
          for (std::int64_t i = begin; i < end; ++i) {
            T* row = out + i * n;
            if (bias != nullptr) {
              for (std::int64_t j = 0; j < n; ++j) row[j] = math.forward(row[j] + bias[j]);
            } else {
              for (std::int64_t j = 0; j < n; ++j) row[j] = math.forward(row[j]);
            }
          }
        },
        std::max<std::int64_t>(n, 1));
  });
}

// One BLAS product out = x W^T (zero when K = 0), then the bias and activation loop.
template <typename T>
void linear_blas(const Tensor& x, const Tensor& weight, const Tensor& bias, Epilogue epilogue,
                 const Tensor& out) {
  const std::int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
  T* o = out.data<T>();
  if (k == 0) {  // an empty sum (all-zero bits are 0 in IEEE float and double)
    std::memset(o, 0, static_cast<std::size_t>(m * n) * sizeof(T));
  } else {
    const int mi = blas_int(m, "linear", "M"), ni = blas_int(n, "linear", "N"),
              ki = blas_int(k, "linear", "K");
    const int lda = blas_int(row_stride(x), "linear", "leading dimension");
    // x [M, K] row-major, W [N, K] row-major read as W^T: the same flags matmul passes for
    // x @ weight.transpose(0, 1), so the products agree bit for bit.
    if constexpr (std::is_same_v<T, double>) {
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mi, ni, ki, 1.0, x.data<double>(), lda,
                  weight.data<double>(), ki, 0.0, o, ni);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mi, ni, ki, 1.0f, x.data<float>(), lda,
                  weight.data<float>(), ki, 0.0f, o, ni);
    }
  }
  add_bias_and_activate<T>(o, bias.defined() ? bias.data<T>() : nullptr, m, n, epilogue);
}

// linear_backward_epilogue's blocks: rows are cut into at most kGradBlocks blocks of at least
// kGradBlockRows rows, and columns into tiles of at most kGradTile, by the shape alone; each
// (block, tile) item sums its columns in T over chains of at most kGradChain rows, each chain
// added in double to the block's sum, and the blocks' sums are added in double in order, so the
// bias gradient has the same bits on any number of threads. Sums in double throughout would make
// the pass markedly slower than an add over the same operands (benchmark_libtorch --profile,
// "linear_backward_epilogue"; docs/matmul.md); the chains keep a float32 sum's error that of 128
// terms at any number of rows.
constexpr std::int64_t kGradBlocks = 32, kGradBlockRows = 64, kGradTile = 2048, kGradChain = 128;

// Rows [r0, r1) x columns [c0, c0 + w) of grad (row length n, w <= kGradTile): z = grad *
// act'(z) into gz (when kZ), and each column's sum of z added to acc[0, w) (when kSum): in T over
// chains of kGradChain rows in order, each chain's sum added in double.
template <bool kRelu, bool kZ, bool kSum, typename T, typename Z>
void epilogue_grad_item(const T* grad, const T* y, Z* gz, double* acc, std::int64_t n,
                        std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t w) {
  const UnaryMath<UnaryOp::relu, T> relu;
  [[maybe_unused]] T sums[kSum ? kGradTile : 1];
  if constexpr (kSum) std::fill(sums, sums + w, T(0));
  for (std::int64_t i = r0; i < r1; ++i) {
    const T* g = grad + i * n + c0;
    [[maybe_unused]] const T* yr = kRelu ? y + i * n + c0 : nullptr;
    [[maybe_unused]] Z* z = kZ ? gz + i * n + c0 : nullptr;
#pragma omp simd
    for (std::int64_t j = 0; j < w; ++j) {
      T v = g[j];
      if constexpr (kRelu) v = relu.derivative(v, yr[j]);
      if constexpr (kZ) {
        if constexpr (std::is_same_v<Z, std::uint16_t>) {
          z[j] = bfloat16::round(static_cast<float>(v));
        } else {
          z[j] = v;
        }
      }
      if constexpr (kSum) sums[j] += v;
    }
    if constexpr (kSum) {
      if ((i - r0 + 1) % kGradChain == 0 || i + 1 == r1) {
        for (std::int64_t j = 0; j < w; ++j) {
          acc[j] += static_cast<double>(sums[j]);
          sums[j] = T(0);
        }
      }
    }
  }
}

template <typename T, typename Z>
void linear_backward_epilogue_kernel(const Tensor& grad, const Tensor& y, bool relu,
                                     const Tensor& grad_z, const Tensor& grad_bias) {
  const std::int64_t m = grad.size(0), n = grad.size(1);
  const bool want_z = grad_z.defined(), want_sum = grad_bias.defined();
  const std::int64_t block_rows = std::max(kGradBlockRows, (m + kGradBlocks - 1) / kGradBlocks);
  const std::int64_t blocks = (m + block_rows - 1) / block_rows;
  const std::int64_t width = std::min(n, kGradTile), tiles = (n + width - 1) / width;
  // partial[b * n + j]: block b's sum of column j.
  std::vector<double> partial(want_sum ? static_cast<std::size_t>(blocks * n) : 0);
  const T* g = grad.data<T>();
  const T* yp = relu ? y.data<T>() : nullptr;
  Z* gz = want_z ? static_cast<Z*>(grad_z.data_ptr()) : nullptr;
  const auto run = [&](auto relu_c, auto z_c, auto sum_c) {
    parallel_for(
        blocks * tiles,
        [&](std::int64_t begin, std::int64_t end) {
          for (std::int64_t item = begin; item < end; ++item) {
            const std::int64_t b = item / tiles, c0 = item % tiles * width;
            const std::int64_t r0 = b * block_rows, r1 = std::min(m, r0 + block_rows);
            const std::int64_t w = std::min(width, n - c0);
            double* acc = sum_c() ? partial.data() + b * n + c0 : nullptr;
            epilogue_grad_item<relu_c(), z_c(), sum_c()>(g, yp, gz, acc, n, r0, r1, c0, w);
          }
        },
        block_rows * width, 2);
  };
  const auto with_sum = [&](auto relu_c, auto z_c) {
    if (want_sum) {
      run(relu_c, z_c, std::true_type{});
    } else {
      run(relu_c, z_c, std::false_type{});
    }
  };
  const auto with_z = [&](auto relu_c) {
    if (want_z) {
      with_sum(relu_c, std::true_type{});
    } else {
      with_sum(relu_c, std::false_type{});
    }
  };
  if (relu) {
    with_z(std::true_type{});
  } else {
    with_z(std::false_type{});
  }
  if (!want_sum) return;
  T* out = grad_bias.data<T>();
  for (std::int64_t j = 0; j < n; ++j) {
    double sum = 0.0;
    for (std::int64_t b = 0; b < blocks; ++b) sum += partial[static_cast<std::size_t>(b * n + j)];
    out[j] = static_cast<T>(sum);
  }
}

}  // namespace

void CpuBackend::linear_backward_epilogue(const Tensor& grad, const Tensor& y, Epilogue epilogue,
                                          const Tensor& grad_z, const Tensor& grad_bias) {
  check_linear_backward_epilogue_args(grad, y, epilogue, grad_z, grad_bias, *this);
  if (grad.numel() == 0) {
    if (grad_bias.defined()) fill(grad_bias, 0.0);  // the sum of no rows
    return;
  }
  const bool relu = epilogue == Epilogue::relu;
  dispatch_floating(grad.dtype(), "linear_backward_epilogue", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) {
      if (grad_z.defined() && grad_z.dtype() == DType::bfloat16) {
        // bfloat16's bits, written as the integers they are.
        return linear_backward_epilogue_kernel<float, std::uint16_t>(grad, y, relu, grad_z,
                                                                     grad_bias);
      }
    }
    linear_backward_epilogue_kernel<T, T>(grad, y, relu, grad_z, grad_bias);
  });
}

// x: [M, K] (unit column stride, row stride >= K), weight: [N, K], bias: [N] or undefined,
// out: [M, N] = act(x weight^T + bias).
void CpuBackend::linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        Epilogue epilogue, const Tensor& out) {
  const LinearShape s = check_linear_args(x, weight, bias, epilogue, out, *this);
  if (out.numel() == 0) return;
  const DType dtype = out.dtype();
  if (x.dtype() == DType::bfloat16 && dtype == DType::float32) {
    // Mixed precision: bfloat16 x and W, the float32 accumulator plus the float32 bias as out.
    if (s.k > 0 && bf16_matmul_native()) {
      linear_dnnl(x, weight, bias, epilogue, out);
    } else {
      linear(raw::to_dtype(x, DType::float32), raw::to_dtype(weight, DType::float32), bias,
             epilogue, out);
    }
    return;
  }
  if (dtype == DType::bfloat16 && (s.k == 0 || !bf16_matmul_native())) {
    // float32 of the exactly widened operands, rounded once at the end.
    const Tensor product = empty(out.shape());
    linear(raw::to_dtype(x, DType::float32), raw::to_dtype(weight, DType::float32),
           bias.defined() ? raw::to_dtype(bias, DType::float32) : Tensor(), epilogue, product);
    copy(product, out);
    return;
  }
  if (dtype == DType::float64) {
    linear_blas<double>(x, weight, bias, epilogue, out);
  } else if (dtype == DType::float32 && s.k == 0) {
    linear_blas<float>(x, weight, bias, epilogue, out);
  } else if (dtype == DType::float32 && matmul_precision() == MatmulPrecision::bf16 &&
             bf16_matmul_fast() && s.m * s.n * s.k > kSmallGemm) {
    linear_dnnl(raw::to_dtype(x, DType::bfloat16), raw::to_dtype(weight, DType::bfloat16), bias,
                epilogue, out);
  } else {
    linear_dnnl(x, weight, bias, epilogue, out);
  }
}

}  // namespace tinyformer::cpu
