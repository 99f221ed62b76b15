// CudaBackend::linear: out = act(x W^T + b) as one cublasLtMatmul call whose epilogue adds the
// bias and applies the activation to each output tile before it is written: BIAS, RELU_BIAS or
// GELU_BIAS (RELU, GELU without a bias), for float32 (in the matmul_precision() mode) and
// bfloat16 (float32 accumulation). cuBLASLt's GELU is the tanh approximation, so gelu_tanh fuses
// whole; the exact gelu takes the bias epilogue and then one kernel with the shared math of
// core/unary_math.h. float64, and a problem for which cuBLASLt offers no algorithm (its
// heuristics weigh the operands' alignment), run cublasGemmEx and then that kernel for the bias
// and the activation.
//
// CudaBackend::linear_backward_epilogue: the gradient of the product (grad masked by relu's
// derivative, rounded to bfloat16 in mixed precision) and the bias gradient (its column sums, in
// double) in one pass over grad.
//
// cuBLAS is column-major (see matmul.cpp): the row-major out [M, N] is the column-major
// D [N, M] = W X^T, where the row-major W [N, K] is the column-major [K, N] matrix read with
// the T flag and the row-major x [M, K] (row stride ld) is the column-major [K, M] matrix with
// leading dimension ld, read as it is. The bias runs along D's rows, as cuBLASLt's bias does.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "backends/cuda/blas_types.h"
#include "backends/cuda/check.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/strided.cuh"
#include "core/error.h"
#include "core/op_checks.h"
#include "core/unary_math.h"

namespace tinyformer::cuda {

namespace {

// The workspace cuBLASLt may use, from the caching allocator.
constexpr std::size_t kWorkspaceBytes = std::size_t{4} << 20;

// --- the epilogue kernel (float64, the exact gelu, and the fallback) ---

// out[i, j] = act(out[i, j] + bias[j]) over the contiguous [M, N] out; bias may be null.
template <typename T, typename Math>
__global__ void add_bias_and_activate(T* out, const T* bias, std::int64_t total, std::int64_t n,
                                      Math math) {
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += step) {
    acc_t<T> v = to_acc(out[i]);
    if (bias != nullptr) v += to_acc(bias[i % n]);
    out[i] = from_acc<T>(math.forward(v));
  }
}

template <typename T>
void launch_bias_activation(const Tensor& out, const Tensor& bias, Epilogue epilogue) {
  if (!bias.defined() && epilogue == Epilogue::none) return;
  const std::int64_t total = out.numel(), n = out.size(1);
  visit_epilogue<acc_t<T>>(epilogue, [&](auto math) {
    add_bias_and_activate<<<grid_for(total), kBlock, 0, stream()>>>(
        device_data<T>(out), bias.defined() ? device_data<T>(bias) : nullptr, total, n, math);
  });
  TF_CUDA_CHECK_LAUNCH("linear");
}

// --- cuBLASLt ---

// cuBLASLt takes the cuBLAS handle itself: a cublasHandle_t holds a cublasLtHandle_t and may be
// cast to one.
cublasLtHandle_t lt() {
  return reinterpret_cast<cublasLtHandle_t>(cublas());
}

// Owns one cuBLASLt descriptor.
template <typename H, cublasStatus_t (*destroy)(H)>
class LtHandle {
 public:
  LtHandle() = default;
  ~LtHandle() {
    if (h_ != nullptr) destroy(h_);
  }
  LtHandle(const LtHandle&) = delete;
  LtHandle& operator=(const LtHandle&) = delete;
  H* out() { return &h_; }
  H get() const { return h_; }

 private:
  H h_ = nullptr;
};
using MatmulDesc = LtHandle<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using LtLayout = LtHandle<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using Preference = LtHandle<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;

// The largest power of two up to 256 that divides the address (cuBLASLt's heuristics assume
// 256-byte aligned operands unless told otherwise).
std::uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

// The epilogue cuBLASLt applies, and whether it covers the whole activation (false for the
// exact gelu, which cuBLASLt lacks).
struct LtEpilogue {
  cublasLtEpilogue_t value;
  bool complete;
};
LtEpilogue lt_epilogue(Epilogue epilogue, bool with_bias) {
  switch (epilogue) {
    case Epilogue::relu:
      return {with_bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU, true};
    case Epilogue::gelu_tanh:
      return {with_bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU, true};
    case Epilogue::gelu:
      return {with_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, false};
    case Epilogue::none:
      break;
  }
  return {with_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, true};
}

template <typename V>
void set_desc(const MatmulDesc& desc, cublasLtMatmulDescAttributes_t attribute, const V& value) {
  TF_CUBLAS_CHECK("linear",
                  cublasLtMatmulDescSetAttribute(desc.get(), attribute, &value, sizeof(value)));
}
template <typename V>
void set_preference(const Preference& pref, cublasLtMatmulPreferenceAttributes_t attribute,
                    const V& value) {
  TF_CUBLAS_CHECK(
      "linear", cublasLtMatmulPreferenceSetAttribute(pref.get(), attribute, &value, sizeof(value)));
}

// The algorithm cuBLASLt's heuristics pick for one problem (none when it has none), cached by
// everything the choice depends on: the device, dtype, math mode, epilogue, sizes, leading
// dimension and the operands' alignments.
std::optional<cublasLtMatmulAlgo_t> cached_algorithm(
    const std::vector<std::int64_t>& key,
    const std::function<std::optional<cublasLtMatmulAlgo_t>()>& pick) {
  static std::mutex mutex;
  static std::map<std::vector<std::int64_t>, std::optional<cublasLtMatmulAlgo_t>> cache;
  {
    std::lock_guard<std::mutex> lock(mutex);
    const auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  const std::optional<cublasLtMatmulAlgo_t> algo = pick();
  std::lock_guard<std::mutex> lock(mutex);
  cache.emplace(key, algo);
  return algo;
}

// Runs the product with cuBLASLt's epilogue; false (nothing run) when cuBLASLt offers no
// algorithm for it. x: [M, K] with row stride ld, weight: [N, K], out: [M, N], float32 or
// bfloat16.
bool linear_lt(const Tensor& x, const Tensor& weight, const Tensor& bias, cublasLtEpilogue_t epi,
               const LinearShape& s, const Tensor& out) {
  // x and W of out's dtype, or bfloat16 into a float32 out and bias (mixed precision).
  const DType dtype = out.dtype();
  const cudaDataType_t in_type = cuda_type(x.dtype()), type = cuda_type(dtype);
  const cublasComputeType_t compute = compute_type(x.dtype());
  MatmulDesc desc;
  TF_CUBLAS_CHECK("linear", cublasLtMatmulDescCreate(desc.out(), compute, CUDA_R_32F));
  set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epi);
  const void* bias_ptr = bias.defined() ? bias.data_ptr() : nullptr;
  if (bias_ptr != nullptr) set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_ptr);
  LtLayout a, b, d;  // W^T [K, N] (ld K), x^T [K, M] (ld ld), D [N, M] (ld N), column-major
  TF_CUBLAS_CHECK("linear", cublasLtMatrixLayoutCreate(a.out(), in_type, s.k, s.n, s.k));
  TF_CUBLAS_CHECK("linear", cublasLtMatrixLayoutCreate(b.out(), in_type, s.k, s.m, s.ld));
  TF_CUBLAS_CHECK("linear", cublasLtMatrixLayoutCreate(d.out(), type, s.n, s.m, s.n));

  const std::uint32_t align_w = alignment_of(weight.data_ptr()),
                      align_x = alignment_of(x.data_ptr()),
                      align_out = alignment_of(out.data_ptr()),
                      align_bias = bias_ptr != nullptr ? alignment_of(bias_ptr) : 0;
  int device = 0;
  TF_CUDA_CHECK("linear", cudaGetDevice(&device));
  const std::vector<std::int64_t> key = {device,
                                         static_cast<std::int64_t>(dtype),
                                         static_cast<std::int64_t>(x.dtype()),
                                         compute,
                                         static_cast<std::int64_t>(epi),
                                         s.m,
                                         s.k,
                                         s.n,
                                         s.ld,
                                         align_w,
                                         align_x,
                                         align_out,
                                         align_bias};
  const std::optional<cublasLtMatmulAlgo_t> algo =
      cached_algorithm(key, [&]() -> std::optional<cublasLtMatmulAlgo_t> {
        Preference pref;
        TF_CUBLAS_CHECK("linear", cublasLtMatmulPreferenceCreate(pref.out()));
        set_preference(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                       static_cast<std::uint64_t>(kWorkspaceBytes));
        set_preference(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_w);
        set_preference(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_x);
        set_preference(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_out);
        set_preference(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_out);
        cublasLtMatmulHeuristicResult_t result{};
        int found = 0;
        const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
            lt(), desc.get(), a.get(), b.get(), d.get(), d.get(), pref.get(), 1, &result, &found);
        if (status != CUBLAS_STATUS_SUCCESS || found == 0) return std::nullopt;
        return result.algo;
      });
  if (!algo) return false;

  // int64 elements: 8-byte granules, the allocator's alignment for the rest.
  const Tensor workspace = empty({static_cast<std::int64_t>(kWorkspaceBytes / 8)},
                                 {.dtype = DType::int64, .device = out.device()});
  const float one = 1.0f, zero = 0.0f;
  TF_CUBLAS_CHECK("linear",
                  cublasLtMatmul(lt(), desc.get(), &one, weight.data_ptr(), a.get(), x.data_ptr(),
                                 b.get(), &zero, out.data_ptr(), d.get(), out.data_ptr(), d.get(),
                                 &*algo, workspace.data_ptr(), kWorkspaceBytes, stream()));
  return true;
}

// out = x W^T with cublasGemmEx (no epilogue).
void linear_gemm(const Tensor& x, const Tensor& weight, const LinearShape& s, const Tensor& out) {
  const DType dtype = out.dtype();
  const cudaDataType_t in_type = cuda_type(x.dtype()), type = cuda_type(dtype);
  const bool f64 = dtype == DType::float64;
  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  TF_CUBLAS_CHECK(
      "linear",
      cublasGemmEx(cublas(), CUBLAS_OP_T, CUBLAS_OP_N, blas_int(s.n, "linear", "N"),
                   blas_int(s.m, "linear", "M"), blas_int(s.k, "linear", "K"),
                   f64 ? static_cast<const void*>(&one_d) : &one_f, weight.data_ptr(), in_type,
                   blas_int(s.k, "linear", "K"), x.data_ptr(), in_type,
                   blas_int(s.ld, "linear", "leading dimension"),
                   f64 ? static_cast<const void*>(&zero_d) : &zero_f, out.data_ptr(), type,
                   blas_int(s.n, "linear", "N"), compute_type(x.dtype()), CUBLAS_GEMM_DEFAULT));
}

}  // namespace

// x: [M, K] (unit column stride, row stride >= K), weight: [N, K], bias: [N] or undefined,
// out: [M, N] = act(x weight^T + bias).
void CudaBackend::linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                         Epilogue epilogue, const Tensor& out) {
  const LinearShape s = check_linear_args(x, weight, bias, epilogue, out, *this);
  if (out.numel() == 0) return;
  if (s.k == 0) {  // an empty sum: every product is 0 (all-zero bits in every float type)
    TF_CUDA_CHECK("linear",
                  cudaMemsetAsync(out.data_ptr(), 0,
                                  static_cast<std::size_t>(out.numel()) * element_size(out.dtype()),
                                  stream()));
    dispatch_floating(out.dtype(), "linear", [&](auto tag) {
      launch_bias_activation<decltype(tag)>(out, bias, epilogue);
    });
    return;
  }
  if (out.dtype() != DType::float64) {
    const LtEpilogue epi = lt_epilogue(epilogue, bias.defined());
    if (linear_lt(x, weight, bias, epi.value, s, out)) {
      if (!epi.complete) {  // the exact gelu after cuBLASLt's bias
        dispatch_floating(out.dtype(), "linear", [&](auto tag) {
          launch_bias_activation<decltype(tag)>(out, Tensor(), epilogue);
        });
      }
      return;
    }
  }
  linear_gemm(x, weight, s, out);
  dispatch_floating(out.dtype(), "linear",
                    [&](auto tag) { launch_bias_activation<decltype(tag)>(out, bias, epilogue); });
}

namespace {

// linear_backward_epilogue's grid: a block covers kGradColumns columns with kGradRows rows of
// threads, over one chunk of the rows; chunks are cut by the shape alone (at most kGradChunks of
// at least kGradChunkRows rows), and their sums are added in order by a second kernel, so the
// bias gradient has the same bits on every run.
constexpr int kGradColumns = 32, kGradRows = 8;
constexpr std::int64_t kGradChunks = 64, kGradChunkRows = 64;

struct GradLayout {
  std::int64_t m = 0, n = 0, chunk = 0, chunks = 1;
};

// Thread (c, w) of item (tile, chunk s): column tile * kGradColumns + c, rows r0 + w,
// r0 + w + kGradRows, ... of chunk s; z = grad * act'(z) into gz (when not null) and the column's
// sum into partial[column * chunks + s] (when not null), the rows' threads combined in order.
template <typename T, typename Z>
__global__ void linear_grad_kernel(const T* grad, const T* y, Z* gz, double* partial,
                                   GradLayout l) {
  __shared__ double tile[kGradRows][kGradColumns];
  const int c = threadIdx.x, w = threadIdx.y;
  const std::int64_t tiles = (l.n + kGradColumns - 1) / kGradColumns;
  const UnaryMath<UnaryOp::relu, acc_t<T>> relu;
  for (std::int64_t item = blockIdx.x; item < tiles * l.chunks; item += gridDim.x) {
    const std::int64_t j = item / l.chunks * kGradColumns + c, s = item % l.chunks;
    const std::int64_t r0 = s * l.chunk, r1 = r0 + l.chunk < l.m ? r0 + l.chunk : l.m;
    double acc = 0.0;
    if (j < l.n) {
      for (std::int64_t r = r0 + w; r < r1; r += kGradRows) {
        const std::int64_t i = r * l.n + j;
        acc_t<T> v = to_acc(grad[i]);
        if (y != nullptr) v = relu.derivative(v, to_acc(y[i]));
        if (gz != nullptr) gz[i] = from_acc<Z>(v);
        acc += static_cast<double>(v);
      }
    }
    if (partial != nullptr) {
      tile[w][c] = acc;
      __syncthreads();
      if (w == 0 && j < l.n) {
        for (int k = 1; k < kGradRows; ++k) acc += tile[k][c];
        partial[j * l.chunks + s] = acc;
      }
      __syncthreads();  // the tile is rewritten by the next item
    }
  }
}

// grad_bias[j] = the sum of partial[j * chunks + s] over s, in order.
template <typename T>
__global__ void linear_grad_bias_kernel(const double* partial, T* grad_bias, GradLayout l) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < l.n;
       j += step) {
    double acc = 0.0;
    for (std::int64_t s = 0; s < l.chunks; ++s) acc += partial[j * l.chunks + s];
    grad_bias[j] = from_acc<T>(acc);
  }
}

template <typename T, typename Z>
void launch_linear_grad(const Tensor& grad, const Tensor& y, const Tensor& grad_z,
                        const Tensor& grad_bias) {
  GradLayout l;
  l.m = grad.size(0);
  l.n = grad.size(1);
  const std::int64_t chunks =
      std::max<std::int64_t>(1, std::min(kGradChunks, l.m / kGradChunkRows));
  l.chunk = (l.m + chunks - 1) / chunks;
  l.chunks = (l.m + l.chunk - 1) / l.chunk;  // no empty chunk
  Tensor partial;
  if (grad_bias.defined()) {
    partial = empty({l.n * l.chunks}, {.dtype = DType::float64, .device = grad.device()});
  }
  const std::int64_t tiles = (l.n + kGradColumns - 1) / kGradColumns;
  const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(tiles * l.chunks, 65536));
  double* pp = grad_bias.defined() ? device_data<double>(partial) : nullptr;
  linear_grad_kernel<T, Z><<<blocks, dim3(kGradColumns, kGradRows), 0, stream()>>>(
      device_data<const T>(grad), y.defined() ? device_data<const T>(y) : nullptr,
      grad_z.defined() ? device_data<Z>(grad_z) : nullptr, pp, l);
  TF_CUDA_CHECK_LAUNCH("linear_backward_epilogue");
  if (grad_bias.defined()) {
    linear_grad_bias_kernel<T>
        <<<grid_for(l.n), kBlock, 0, stream()>>>(pp, device_data<T>(grad_bias), l);
    TF_CUDA_CHECK_LAUNCH("linear_backward_epilogue");
  }
}

}  // namespace

void CudaBackend::linear_backward_epilogue(const Tensor& grad, const Tensor& y, Epilogue epilogue,
                                           const Tensor& grad_z, const Tensor& grad_bias) {
  check_linear_backward_epilogue_args(grad, y, epilogue, grad_z, grad_bias, *this);
  if (grad.numel() == 0) {
    if (grad_bias.defined()) fill(grad_bias, 0.0);  // the sum of no rows
    return;
  }
  const Tensor relu_y = epilogue == Epilogue::relu ? y : Tensor();
  dispatch_floating(grad.dtype(), "linear_backward_epilogue", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) {
      if (grad_z.defined() && grad_z.dtype() == DType::bfloat16) {
        return launch_linear_grad<float, bf16>(grad, relu_y, grad_z, grad_bias);
      }
    }
    launch_linear_grad<T, T>(grad, relu_y, grad_z, grad_bias);
  });
}

}  // namespace tinyformer::cuda
