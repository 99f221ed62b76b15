// The CPU's fused linear op, its own concerns: float32 under MatmulPrecision::bf16 rounds x and
// the weight to bfloat16 where the CPU has the instructions (as matmul does) and keeps the bias
// and the result in float32; and its oneDNN primitives are cached by shape and epilogue.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/dnnl_context.h"
#include "backends/cpu/matmul.h"
#include "core/backend.h"
#include "core/tensor.h"

namespace {

using namespace tinyformer;

Backend& cpu_backend() {
  return backend(Device::cpu());
}

double rounded_to_bf16(float v) {
  return static_cast<double>(static_cast<float>(bfloat16(v)));
}

}  // namespace

TEST_CASE(
    "linear under MatmulPrecision::bf16: x and weight rounded where the CPU has the instructions, "
    "the bias not") {
  const bool native = cpu::bf16_matmul_fast();
  MESSAGE("float32 linear under bf16 precision is "
          << std::string(native ? "a bfloat16 product" : "exact (no bfloat16 kernel on this CPU)"));
  // Above the small-product size (64^3), which stays exact.
  const std::int64_t m = 70, k = 150, n = 40;
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> xv(static_cast<std::size_t>(m * k)), wv(static_cast<std::size_t>(n * k)),
      bv(static_cast<std::size_t>(n));
  for (float& v : xv) v = dist(gen);  // not representable in bfloat16, as a rule
  for (float& v : wv) v = dist(gen);
  for (float& v : bv) v = dist(gen);
  const Tensor x = from<float>(xv, {m, k}), w = from<float>(wv, {n, k}), b = from<float>(bv, {n});
  const auto run = [&](MatmulPrecision precision) {
    set_matmul_precision(precision);
    Tensor out = empty({m, n});
    cpu_backend().linear(x, w, b, Epilogue::relu, out);
    set_matmul_precision(MatmulPrecision::exact);
    return out.to_vector<float>();
  };
  const std::vector<float> exact = run(MatmulPrecision::exact);
  const std::vector<float> reduced = run(MatmulPrecision::bf16);
  double largest_change = 0;
  for (std::int64_t r = 0; r < m; ++r) {
    for (std::int64_t c = 0; c < n; ++c) {
      double ref = 0, ref16 = 0, mag = std::abs(bv[c]);
      for (std::int64_t j = 0; j < k; ++j) {
        const float xi = xv[static_cast<std::size_t>(r * k + j)];
        const float wi = wv[static_cast<std::size_t>(c * k + j)];
        ref += double(xi) * double(wi);
        ref16 += rounded_to_bf16(xi) * rounded_to_bf16(wi);
        mag += std::abs(double(xi) * double(wi));
      }
      ref = std::max(ref + bv[c], 0.0);  // the bias exactly, then relu
      ref16 = std::max(ref16 + bv[c], 0.0);
      const auto i = static_cast<std::size_t>(r * n + c);
      CHECK(std::abs(exact[i] - ref) <= 1e-5 * mag);
      CHECK(std::abs(reduced[i] - (native ? ref16 : ref)) <= 1e-5 * mag);
      largest_change = std::max(largest_change, std::abs(double(reduced[i]) - exact[i]));
    }
  }
  // Rounding 150-term sums' operands to 8 bits moves some results far more than float32's
  // rounding; without the instructions nothing moves.
  if (native) {
    CHECK(largest_change > 1e-3);
  } else {
    CHECK(largest_change == 0.0);
  }
}

TEST_CASE("linear: oneDNN primitives are cached by shape and epilogue") {
  const Tensor x = randn({9, 70}), w = randn({33, 70}), b = randn({33});
  Tensor out = empty({9, 33});
  cpu_backend().linear(x, w, b, Epilogue::gelu, out);
  const auto before = cpu::dnnl_cache_stats();
  cpu_backend().linear(x, w, b, Epilogue::gelu, out);
  const auto repeated = cpu::dnnl_cache_stats();
  CHECK(repeated.hits == before.hits + 1);
  CHECK(repeated.misses == before.misses);
  // Another epilogue, or no bias, is another primitive.
  cpu_backend().linear(x, w, b, Epilogue::gelu_tanh, out);
  cpu_backend().linear(x, w, Tensor(), Epilogue::gelu, out);
  CHECK(cpu::dnnl_cache_stats().misses == repeated.misses + 2);
}
