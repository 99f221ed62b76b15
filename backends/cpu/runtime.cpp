// The CPU backend's entry in the backend registry, the dtypes its kernels take, and
// cpu::runtime_info(): which kernels this process runs (OpenBLAS core and threading, oneDNN
// version and ISA, OpenMP threads). Benchmarks print it, since their numbers mean little without
// it.
#include <cblas.h>
#include <omp.h>

#include <cstdlib>
#include <dnnl.hpp>
#include <sstream>
#include <string>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/matmul.h"
#include "backends/cpu/parallel.h"

namespace tinyformer::cpu {

namespace {

const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic:
      return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "unknown";
  }
}

// openblas_get_parallel(): 0 sequential, 1 its own pthreads, 2 OpenMP.
const char* parallel_name(int mode) {
  switch (mode) {
    case 0:
      return "sequential";
    case 1:
      return "pthreads";
    case 2:
      return "OpenMP";
  }
  return "unknown";
}

}  // namespace

std::string runtime_info() {
  std::ostringstream s;
  const dnnl_version_t* v = dnnl::version();
  s << "OpenBLAS: core " << openblas_get_corename() << ", "
    << parallel_name(openblas_get_parallel()) << ", " << openblas_get_num_threads() << " threads";
  // OpenBLAS picks its kernels from this variable when the library loads, ignoring the CPU:
  // worth printing, because it can halve sgemm speed on a machine with wider vectors.
  if (const char* forced = std::getenv("OPENBLAS_CORETYPE")) {
    s << " (OPENBLAS_CORETYPE=" << forced << ")";
  }
  s << "\noneDNN: " << v->major << '.' << v->minor << '.' << v->patch << ", ISA "
    << isa_name(dnnl::get_effective_cpu_isa()) << ", "
    << (v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other") << " runtime\n"
    << "OpenMP: " << omp_get_max_threads() << " threads (of " << omp_get_num_procs()
    << " processors), " << wait_policy_info() << "\n"
    << "parallel grain: " << parallel_grain_info() << "\n"
    << "bfloat16 products: "
    << (bf16_matmul_amx()      ? "oneDNN bfloat16 kernels on AMX tiles"
        : bf16_matmul_fast()   ? "oneDNN bfloat16 kernels"
        : bf16_matmul_native() ? "oneDNN bfloat16 kernels, emulated (no BF16 instructions)"
                               : "no oneDNN kernel on this CPU (float32)")
    << "; float32 products: "
    << (matmul_precision() == MatmulPrecision::bf16 && bf16_matmul_fast()
            ? "operands rounded to bfloat16 (set_matmul_precision)"
            : "exact");
  return s.str();
}

CpuBackend::CpuBackend() {
  parallel_grain();  // a malformed TINYFORMER_PARALLEL_GRAIN fails here, at the first CPU op
}

std::string CpuBackend::runtime_info() {
  return cpu::runtime_info();
}

CpuBackend& instance() {
  static CpuBackend backend;
  return backend;
}

namespace {

Backend& get_instance() {
  return instance();
}

// The primary backend of CPU tensors, entered in the registry before main.
const BackendRegistrar registrar({.name = "cpu",
                                  .device = DeviceType::cpu,
                                  .get = &get_instance,
                                  .primary = true,
                                  .available = nullptr});

}  // namespace

// The dtypes each op family's dispatch takes (the kernel files say why). Products run bfloat16
// on oneDNN (or float32 where it has no bfloat16 kernel); the other floating kernels have no
// bfloat16 path. adamw_step takes no bfloat16: moments kept in bfloat16 would stall, as
// beta2 * v rounds back to v for beta2 = 0.999.
bool CpuBackend::supports(Op op, DType dtype) const {
  const bool f32_f64 = dtype == DType::float32 || dtype == DType::float64;
  switch (op) {
    case Op::fill:
    case Op::copy:
    case Op::random:  // bernoulli: any dtype; the other kinds: floating only
      return true;
    case Op::arange:
      return dtype != DType::boolean;
    case Op::unary:
    case Op::reduce:
    case Op::max_dim:
      return f32_f64 || dtype == DType::int64;
    case Op::binary:  // bool for comparisons only
    case Op::where:
    case Op::index_select:
      return dtype != DType::bfloat16;
    case Op::matmul:
    case Op::linear:
      return f32_f64 || dtype == DType::bfloat16;
    case Op::unary_backward:
    case Op::linear_backward_epilogue:
    case Op::attention:
    case Op::attention_backward:
    case Op::flash_attention:
    case Op::flash_attention_backward:
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
    case Op::adamw_step:
    case Op::sum_squares:
      return f32_f64;
  }
  return false;
}

}  // namespace tinyformer::cpu

// Named on the link line of a static build (CMakeLists.txt): nothing else refers to this file,
// and without it the linker would leave out the registrar above and the backend with it.
extern "C" void tinyformer_backend_cpu_registered() {}
