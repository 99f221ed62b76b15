// The CUDA runtime state: the backend object and its entry in the backend registry, the dtypes
// its kernels take, one stream and one cuBLAS and cuDNN handle per device (created on first
// use), host-device copies, synchronisation, the math mode and the description benchmarks print.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <array>
#include <atomic>
#include <mutex>
#include <sstream>
#include <string>

#include "backends/cuda/check.h"
#include "backends/cuda/cuda_backend.h"

namespace tinyformer {
namespace cuda {

namespace {

// Whether the driver reports a GPU; asked once.
bool gpu_present() {
  static const bool present = [] {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      cudaGetLastError();  // clears the sticky "no driver" error
      return false;
    }
    return count > 0;
  }();
  return present;
}

// The registry's getter: the backend, or a clear Error on a machine without a GPU.
Backend& checked_instance() {
  if (!gpu_present()) {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    cudaGetLastError();
    fail("cuda: no usable GPU (",
         status == cudaSuccess ? "no device found" : cudaGetErrorString(status),
         "); use the CPU (--device cpu, Device::cpu())");
  }
  return instance();
}

// The primary backend of CUDA tensors, entered in the registry before main.
const BackendRegistrar registrar({.name = "cuda",
                                  .device = DeviceType::cuda,
                                  .get = &checked_instance,
                                  .primary = true,
                                  .available = &gpu_present});

}  // namespace

CudaBackend& instance() {
  static CudaBackend backend;
  return backend;
}

// The dtypes each op family's dispatch takes (the kernel files say why): every floating kernel
// also runs bfloat16, computing in float32. adamw_step takes no bfloat16: moments kept in
// bfloat16 would stall, as beta2 * v rounds back to v for beta2 = 0.999.
bool CudaBackend::supports(Op op, DType dtype) const {
  const bool floating = is_floating(dtype);
  switch (op) {
    case Op::fill:
    case Op::copy:
    case Op::random:  // bernoulli: any dtype; the other kinds: floating only
    case Op::binary:  // bool for comparisons only
    case Op::where:
    case Op::index_select:
      return true;
    case Op::arange:
      return dtype != DType::boolean;
    case Op::unary:
    case Op::reduce:
    case Op::max_dim:
      return floating || dtype == DType::int64;
    case Op::unary_backward:
    case Op::linear_backward_epilogue:
    case Op::matmul:
    case Op::linear:
    case Op::softmax:
    case Op::softmax_backward:
    case Op::layer_norm:
    case Op::add_layer_norm:
    case Op::layer_norm_backward:
    case Op::nll_loss:
    case Op::nll_loss_backward:
    case Op::conv1d:
    case Op::conv1d_backward:
    case Op::pool1d:
    case Op::pool1d_backward:
    case Op::index_add:
      return floating;
    case Op::attention:
    case Op::attention_backward:
    case Op::flash_attention:
    case Op::flash_attention_backward:
    case Op::adamw_step:
    case Op::sum_squares:
      return dtype == DType::float32 || dtype == DType::float64;
  }
  return false;
}

namespace {

constexpr int kMaxDevices = 16;

// The per-device state, created on first use by the thread that first needs it.
struct DeviceContext {
  std::once_flag once;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  cudnnHandle_t cudnn = nullptr;
};

std::array<DeviceContext, kMaxDevices>& contexts() {
  static std::array<DeviceContext, kMaxDevices> all;
  return all;
}

DeviceContext& current_context() {
  int device = 0;
  TF_CUDA_CHECK("cuda", cudaGetDevice(&device));
  TF_CHECK(device >= 0 && device < kMaxDevices, "cuda: device index ", device, " is above ",
           kMaxDevices - 1);
  DeviceContext& ctx = contexts()[static_cast<std::size_t>(device)];
  std::call_once(ctx.once, [&] {
    TF_CUDA_CHECK("cuda", cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking));
    TF_CUBLAS_CHECK("cuda", cublasCreate(&ctx.cublas));
    TF_CUBLAS_CHECK("cuda", cublasSetStream(ctx.cublas, ctx.stream));
    TF_CUDNN_CHECK("cuda", cudnnCreate(&ctx.cudnn));
    TF_CUDNN_CHECK("cuda", cudnnSetStream(ctx.cudnn, ctx.stream));
  });
  return ctx;
}

}  // namespace

cudaStream_t stream() {
  return current_context().stream;
}
cublasHandle_t cublas() {
  return current_context().cublas;
}
cudnnHandle_t cudnn() {
  return current_context().cudnn;
}

const char* cublas_status_name(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "unknown cuBLAS status";
}

void CudaBackend::synchronize() {
  TF_CUDA_CHECK("synchronize", cudaStreamSynchronize(stream()));
}

// Copies queue on stream() behind the kernels that produce the data. A copy to host memory
// waits for it to land (the caller reads the bytes next); a copy from host memory waits too,
// because the host buffer may be freed or reused as soon as this returns.
void CudaBackend::memcpy(void* dst, Device dst_device, const void* src, Device src_device,
                         std::size_t bytes) {
  if (bytes == 0) return;
  cudaMemcpyKind kind = cudaMemcpyDeviceToDevice;
  if (dst_device.is_cpu() && src_device.is_cuda()) kind = cudaMemcpyDeviceToHost;
  if (dst_device.is_cuda() && src_device.is_cpu()) kind = cudaMemcpyHostToDevice;
  if (dst_device.is_cpu() && src_device.is_cpu()) kind = cudaMemcpyHostToHost;
  TF_CUDA_CHECK("memcpy", cudaMemcpyAsync(dst, src, bytes, kind, stream()));
  if (kind != cudaMemcpyDeviceToDevice) {
    TF_CUDA_CHECK("memcpy", cudaStreamSynchronize(stream()));
  }
}

std::string runtime_info() {
  std::ostringstream os;
  int driver = 0, runtime = 0, device = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  TF_CUDA_CHECK("runtime_info", cudaGetDevice(&device));
  cudaDeviceProp prop{};
  TF_CUDA_CHECK("runtime_info", cudaGetDeviceProperties(&prop, device));
  int cublas_version = 0;
  TF_CUBLAS_CHECK("runtime_info", cublasGetVersion(cublas(), &cublas_version));
  os << "GPU " << device << ": " << prop.name << " (sm_" << prop.major << prop.minor << ", "
     << prop.multiProcessorCount << " SMs, " << (prop.totalGlobalMem >> 20) << " MiB); driver "
     << driver / 1000 << "." << driver % 1000 / 10 << ", runtime " << runtime / 1000 << "."
     << runtime % 1000 / 10 << ", cuBLAS " << cublas_version << ", cuDNN " << cudnnGetVersion()
     << "; float32 products: "
     << (matmul_precision() == MatmulPrecision::exact  ? "exact"
         : matmul_precision() == MatmulPrecision::tf32 ? "TF32 tensor cores"
                                                       : "bfloat16 tensor cores");
  return os.str();
}

std::string CudaBackend::runtime_info() {
  return cuda::runtime_info();
}

}  // namespace cuda
}  // namespace tinyformer

// Named on the link line of a static build (CMakeLists.txt): nothing else refers to this file,
// and without it the linker would leave out the registrar above and the backend with it.
extern "C" void tinyformer_backend_cuda_registered() {}
