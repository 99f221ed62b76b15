// The CPU backend's parallel grain (backends/cpu/parallel.h): which passes go to the OpenMP team,
// and that the choice never changes a result. Every pass that takes the grain is run three ways,
// on the team (smallest grain), on the calling thread (a grain above its size) and with one
// OpenMP thread, and the three results must agree to the bit.
//
// This suite runs its kernels with the smallest grain (tests/backends/parallel_grain.cpp), so
// that the other kernel tests reach the threaded paths at the sizes they use; the cases here set
// the grain themselves.
#include <doctest/doctest.h>
#include <omp.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/parallel.h"
#include "core/backend.h"
#include "core/error.h"
#include "core/tensor.h"

namespace {

using namespace tinyformer;
namespace grain = tinyformer::cpu;

Backend& cpu_backend() {
  return backend(Device::cpu());
}

Tensor random_tensor(const Shape& shape, DType dtype, unsigned seed, double lo = -1,
                     double hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (double& x : v) x = dist(gen);
  if (dtype == DType::float64) return from<double>(v, shape);
  return from<float>(std::vector<float>(v.begin(), v.end()), shape);
}

// The bytes of the tensors `run` writes, for a bitwise comparison.
using Run = std::function<std::vector<Tensor>()>;
std::vector<std::string> bytes_of(const std::vector<Tensor>& ts) {
  std::vector<std::string> out;
  for (const Tensor& t : ts) {
    REQUIRE(t.is_contiguous());
    const auto* p = static_cast<const char*>(t.data_ptr());
    out.emplace_back(p, p + t.numel() * static_cast<std::int64_t>(element_size(t.dtype())));
  }
  return out;
}

class GrainScope {
 public:
  explicit GrainScope(std::int64_t grain) : saved_(grain::parallel_grain()) {
    grain::set_parallel_grain(grain);
  }
  ~GrainScope() { grain::set_parallel_grain(saved_); }
  GrainScope(const GrainScope&) = delete;
  GrainScope& operator=(const GrainScope&) = delete;

 private:
  std::int64_t saved_;
};

// run() on the team, on the calling thread by grain, and on one OpenMP thread: equal bits.
void check_same_bits(const std::string& name, const Run& run) {
  CAPTURE(name);
  std::vector<std::string> team, grain_serial, one_thread;
  {
    GrainScope g(grain::kMinParallelGrain);
    team = bytes_of(run());
  }
  {
    GrainScope g(std::int64_t{1} << 40);
    grain_serial = bytes_of(run());
  }
  {
    GrainScope g(grain::kMinParallelGrain);
    const int before = omp_get_max_threads();
    omp_set_num_threads(1);
    one_thread = bytes_of(run());
    omp_set_num_threads(before);
  }
  CHECK(team == grain_serial);
  CHECK(team == one_thread);
}

}  // namespace

TEST_CASE("parallel grain: a pass goes to the team above the grain, scaled by its cost") {
  if (omp_get_max_threads() < 2) return;  // one thread: nothing goes parallel
  GrainScope g(std::int64_t{1} << 16);
  CHECK_FALSE(grain::parallel_worth((std::int64_t{1} << 16) - 1));
  CHECK(grain::parallel_worth(std::int64_t{1} << 16));
  CHECK(grain::parallel_worth(std::int64_t{1} << 14, 4));
  CHECK_FALSE(grain::parallel_worth((std::int64_t{1} << 14) - 1, 4));
  CHECK(grain::pass_threads(std::int64_t{1} << 20) == omp_get_max_threads());
  CHECK(grain::pass_threads(16) == 1);
  int inside = -1;
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    inside = grain::parallel_worth(std::int64_t{1} << 30) ? 1 : 0;
  }
  CHECK(inside == 0);  // never from inside a parallel region
  CHECK(grain::parallel_grain_info().find("65536") != std::string::npos);
}

TEST_CASE("parallel grain: set_parallel_grain rejects a negative grain, 0 restores the default") {
  const std::int64_t configured = grain::parallel_grain();
  CHECK_THROWS_WITH_AS(grain::set_parallel_grain(-1),
                       doctest::Contains("set_parallel_grain: expected a grain >= 0"), Error);
  grain::set_parallel_grain(123456);
  CHECK(grain::parallel_grain() == 123456);
  CHECK(grain::parallel_grain_info().find("set_parallel_grain") != std::string::npos);
  grain::set_parallel_grain(0);
  const std::string info = grain::parallel_grain_info();
  CHECK(info.find("set_parallel_grain") == std::string::npos);
  // This suite's own setting (parallel_grain.cpp) is an override too; without it the grain is
  // the configured one, which is never below the smallest.
  CHECK(grain::parallel_grain() >= grain::kMinParallelGrain);
  grain::set_parallel_grain(configured);
}

TEST_CASE("parallel grain: every pass that takes it gives the same bits on any thread count") {
  for (DType dtype : {DType::float32, DType::float64}) {
    CAPTURE(dtype);
    // Sizes between the smallest grain and the default one, with rows that do not divide evenly.
    const Tensor a = random_tensor({997, 301}, dtype, 1);
    const Tensor b = random_tensor({997, 301}, dtype, 2);
    const Tensor w = random_tensor({301}, dtype, 3);
    const Tensor bias = random_tensor({301}, dtype, 4);
    check_same_bits("copy, transposing", [&] {
      Tensor out = empty({301, 997}, {.dtype = dtype});
      cpu_backend().copy(a.transpose(0, 1), out);
      return std::vector<Tensor>{out};
    });
    check_same_bits("binary add, broadcast", [&] {
      Tensor out = empty({997, 301}, {.dtype = dtype});
      cpu_backend().binary(BinaryOp::add, a, bias.unsqueeze(0).expand({997, 301}), out);
      return std::vector<Tensor>{out};
    });
    check_same_bits("unary exp", [&] {
      Tensor out = empty({997, 301}, {.dtype = dtype});
      cpu_backend().unary(UnaryOp::exp, a, out, 0.0);
      return std::vector<Tensor>{out};
    });
    check_same_bits("reduce sum over rows, over columns, over all", [&] {
      Tensor rows = empty({1, 301}, {.dtype = dtype}), cols = empty({997, 1}, {.dtype = dtype}),
             all = empty({1, 1}, {.dtype = dtype});
      cpu_backend().reduce(ReduceOp::sum, a, {0}, rows);
      cpu_backend().reduce(ReduceOp::sum, a, {1}, cols);
      cpu_backend().reduce(ReduceOp::sum, a, {0, 1}, all);
      return std::vector<Tensor>{rows, cols, all};
    });
    check_same_bits("reduce sum over pooling windows of a permuted view", [&] {
      const Tensor x = random_tensor({8, 128, 4, 33}, dtype, 9);
      const Tensor windows = x.permute({0, 2, 1, 3}).reshape({8, 4, 32, 4, 33});
      Tensor out = empty({8, 4, 32, 1, 33}, {.dtype = dtype});
      cpu_backend().reduce(ReduceOp::sum, windows, {3}, out);
      return std::vector<Tensor>{out};
    });
    check_same_bits("softmax and its backward", [&] {
      Tensor y = empty({997, 301}, {.dtype = dtype}), dx = empty({997, 301}, {.dtype = dtype});
      cpu_backend().softmax(a, false, y);
      cpu_backend().softmax_backward(y, b, false, dx);
      return std::vector<Tensor>{y, dx};
    });
    check_same_bits("layer norm, add + layer norm, and the backward's column sums", [&] {
      Tensor y = empty({997, 301}, {.dtype = dtype}), h = empty({997, 301}, {.dtype = dtype});
      Tensor mean = empty({997}, {.dtype = dtype}), rstd = empty({997}, {.dtype = dtype});
      cpu_backend().add_layer_norm(a, b, w, bias, 1e-5, y, h, mean, rstd);
      Tensor dx = empty({997, 301}, {.dtype = dtype}), dw = empty({301}, {.dtype = dtype}),
             db = empty({301}, {.dtype = dtype});
      cpu_backend().layer_norm_backward(b, h, w, mean, rstd, dx, dw, db);
      return std::vector<Tensor>{y, h, mean, rstd, dx, dw, db};
    });
    check_same_bits("linear's epilogue backward: relu's mask and the bias's column sums", [&] {
      Tensor gz = empty({997, 301}, {.dtype = dtype}), gb = empty({301}, {.dtype = dtype});
      cpu_backend().linear_backward_epilogue(a, b, Epilogue::relu, gz, gb);
      std::vector<Tensor> out{gz, gb};
      if (dtype == DType::float32) {  // mixed precision: the gradient rounded to bfloat16
        Tensor low = empty({997, 301}, {.dtype = DType::bfloat16}), gb2 = empty({301});
        cpu_backend().linear_backward_epilogue(a, Tensor(), Epilogue::none, low, gb2);
        out.push_back(low);
        out.push_back(gb2);
      }
      return out;
    });
    // 6 matrices: the backward's two passes; 16: a matrix per item.
    for (std::int64_t heads : {3, 8}) {
      check_same_bits(
          "attention and its backward, " + std::to_string(2 * heads) + " matrices", [&] {
            const Tensor q = random_tensor({2, heads, 97, 16}, dtype, 5),
                         k = random_tensor({2, heads, 301, 16}, dtype, 6),
                         v = random_tensor({2, heads, 301, 8}, dtype, 7),
                         g = random_tensor({2, heads, 97, 8}, dtype, 8);
            Tensor probs = empty({2, heads, 97, 301}, {.dtype = dtype}),
                   out = empty({2, heads, 97, 8}, {.dtype = dtype});
            cpu_backend().attention(q, k, v, Tensor(), true, 0.25, probs, out);
            Tensor gq = empty(q.shape(), {.dtype = dtype}), gk = empty(k.shape(), {.dtype = dtype}),
                   gv = empty(v.shape(), {.dtype = dtype});
            cpu_backend().attention_backward(g, q, k, v, probs, true, 0.25, gq, gk, gv);
            return std::vector<Tensor>{probs, out, gq, gk, gv};
          });
    }
    check_same_bits("adamw step", [&] {
      Tensor p = empty({997, 301}, {.dtype = dtype}), m = empty({997, 301}, {.dtype = dtype}),
             v = empty({997, 301}, {.dtype = dtype});
      cpu_backend().copy(a, p);  // updated in place
      cpu_backend().fill(m, 0.0);
      cpu_backend().fill(v, 0.0);
      cpu_backend().adamw_step(p, b, m, v, 1e-3, 0.9, 0.999, 1e-8, 0.01, true, 0.1, 0.001);
      return std::vector<Tensor>{p, m, v};
    });
    check_same_bits("sum of squares", [&] {  // 997 x 301: 19 blocks of the kernel
      Tensor out = empty({1}, {.dtype = DType::float64});
      cpu_backend().sum_squares(a, out);
      return std::vector<Tensor>{out};
    });
  }
}

// TINYFORMER_PARALLEL_GRAIN: ctest runs this case with a valid value (and
// TINYFORMER_EXPECT_GRAIN naming it) and with a malformed one, whose Error must reach the output
// (tests/CMakeLists.txt). Without either variable the configured grain is one of the two
// defaults.
TEST_CASE("parallel grain: the environment sets it, a malformed value is an Error") {
  const std::int64_t suite = grain::parallel_grain();
  grain::set_parallel_grain(0);  // this suite's own setting off: the configured grain shows
  std::int64_t configured = 0;
  std::string info;
  try {
    configured = grain::parallel_grain();
    info = grain::parallel_grain_info();
  } catch (...) {
    grain::set_parallel_grain(suite);
    throw;
  }
  grain::set_parallel_grain(suite);
  if (const char* expect = std::getenv("TINYFORMER_EXPECT_GRAIN")) {
    CHECK(configured == std::atoll(expect));
    if (std::getenv("TINYFORMER_PARALLEL_GRAIN") != nullptr) {
      CHECK(info.find("(TINYFORMER_PARALLEL_GRAIN)") != std::string::npos);
    }
  } else if (std::getenv("TINYFORMER_PARALLEL_GRAIN") == nullptr) {
    CHECK((configured == grain::kPassiveGrain || configured == grain::kBriefSpinGrain ||
           configured == grain::kMinParallelGrain));
  }
}
