// The op profiler: which primitive ops a forward and backward run, how often, their work.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/backend.h"
#include "core/error.h"
#include "core/profiler.h"

namespace tf = tinyformer;
using tf::Tensor;

namespace {

const tf::OpProfile* find(const std::vector<tf::OpProfile>& rows, const std::string& name) {
  const auto it = std::find_if(rows.begin(), rows.end(),
                               [&](const tf::OpProfile& r) { return r.name == name; });
  return it == rows.end() ? nullptr : &*it;
}

}  // namespace

TEST_CASE("Profiler counts the ops of a forward and backward, with the products' work") {
  Tensor a = tf::randn({3, 5, 7}, {tf::DType::float64});
  Tensor b = tf::randn({7, 4}, {tf::DType::float64});
  a.requires_grad_(true);
  b.requires_grad_(true);
  tf::Profiler profiler;
  Tensor y = tf::relu(tf::matmul(a, b));
  tf::sum(y).backward();
  const auto rows = profiler.ops();

  // Forward a @ b, then backward grad @ b^T and a^T @ grad: three products of 3*5*7*4
  // multiply-adds each.
  const tf::OpProfile* mm = find(rows, "matmul");
  REQUIRE(mm != nullptr);
  CHECK(mm->calls == 3);
  CHECK(mm->device == "cpu");
  CHECK(mm->flops == doctest::Approx(3 * 2.0 * 3 * 5 * 7 * 4));
  CHECK(mm->seconds >= 0);
  const tf::OpProfile* relu = find(rows, "unary relu");
  REQUIRE(relu != nullptr);
  CHECK(relu->calls == 1);
  CHECK(relu->bytes == doctest::Approx(2 * 3 * 5 * 4 * 8));  // input and output, float64
  CHECK(find(rows, "unary_backward relu") != nullptr);
  // Rows come longest first, and the table names every row and the time between ops.
  for (std::size_t i = 1; i < rows.size(); ++i) CHECK(rows[i - 1].seconds >= rows[i].seconds);
  const std::string table = profiler.table();
  CHECK(table.find("unary relu") != std::string::npos);
  CHECK(table.find("GFLOP/s") != std::string::npos);
  CHECK(table.find("between ops") != std::string::npos);

  profiler.reset();
  CHECK(profiler.ops().empty());
}

TEST_CASE("masked_fill's backward runs one where, for the input that needs a gradient") {
  Tensor x = tf::randn({4, 6, 8}, {tf::DType::float64});
  x.requires_grad_(true);
  const Tensor rows = tf::from<bool>({true, false, false, true, false, true}, {1, 6, 1});
  tf::Profiler profiler;
  Tensor y = tf::masked_fill(x, rows, 0.0);
  tf::sum(y * y).backward();
  const auto rows_profiled = profiler.ops();
  const tf::OpProfile* where = find(rows_profiled, "where");
  REQUIRE(where != nullptr);
  CHECK(where->calls == 2);  // forward, and the gradient of x only: the fill value is a constant
  // The gradient itself: 2 x where the row is kept, 0 where it was filled.
  const Tensor want = tf::where(rows, tf::zeros({4, 6, 8}, {tf::DType::float64}), x.detach() * 2.0);
  CHECK(tf::max(tf::abs(x.grad() - want)).item<double>() == 0.0);
}

TEST_CASE("dropout draws its mask with the scale in it: one draw and one product, forward") {
  const std::int64_t n = 4099;  // not a multiple of a Philox counter's four draws
  Tensor x = tf::randn({n});
  x.requires_grad_(true);
  tf::Generator gen(31);
  tf::Profiler profiler;
  Tensor y = tf::dropout(x, 0.25, true, &gen);
  const auto rows = profiler.ops();
  const tf::OpProfile* draw = find(rows, "random scaled_bernoulli");
  REQUIRE(draw != nullptr);
  CHECK(draw->calls == 1);
  const tf::OpProfile* mul = find(rows, "binary mul");
  REQUIRE(mul != nullptr);
  CHECK(mul->calls == 1);  // x times the mask; no pass that scales a 0/1 mask
  CHECK(find(rows, "random bernoulli") == nullptr);
  profiler.reset();

  // The values: x times the 0/1 draw of the same seed and offset, times 1 / (1 - p) rounded to
  // float32; and the gradient of sum(y) is that scaled mask.
  tf::Generator same(31);
  const auto [seed, offset] = same.reserve(static_cast<std::uint64_t>(n));
  Tensor coin = tf::empty({n});
  tf::backend(tf::Device::cpu()).random(coin, tf::RandomKind::bernoulli, seed, offset, 0.75, 0.0);
  const float scale = static_cast<float>(1.0 / 0.75);
  const auto xv = x.detach().to_vector<float>(), cv = coin.to_vector<float>(),
             yv = y.detach().to_vector<float>();
  std::int64_t kept = 0, wrong = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto at = static_cast<std::size_t>(i);
    wrong += yv[at] != xv[at] * (cv[at] * scale);
    kept += cv[at] == 1.0f;
  }
  CHECK(wrong == 0);
  CHECK(kept > 0.7 * n);
  CHECK(kept < 0.8 * n);
  tf::sum(y).backward();
  const auto gv = x.grad().to_vector<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    const auto at = static_cast<std::size_t>(i);
    wrong += gv[at] != cv[at] * scale;
  }
  CHECK(wrong == 0);
}

TEST_CASE("Profiler by shape keys each product by its shape and transposed operands") {
  const Tensor a = tf::randn({6, 3});
  const Tensor b = tf::randn({6, 2});
  tf::Profiler profiler(/*by_shape=*/true);
  tf::matmul(tf::transpose(a, 0, 1), b);  // [3x6] read column-major, times [6x2]
  const auto rows = profiler.ops();
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].name == "matmul 1x[3x6]^T[6x2]");
  CHECK(rows[0].flops == doctest::Approx(2.0 * 3 * 6 * 2));

  // A transposed view made contiguous is a copy keyed by the source's layout.
  profiler.reset();
  tf::contiguous(tf::transpose(a, 0, 1));
  const auto copies = profiler.ops();
  REQUIRE(copies.size() == 1);
  CHECK(copies[0].name == "copy [3x6] strides [1,3]");
  CHECK(copies[0].bytes == doctest::Approx(2 * 18 * 4));
  CHECK(profiler.table().find("copy [3x6] strides [1,3]") != std::string::npos);
}

TEST_CASE("Profiler: only one at a time, and nothing is recorded without one") {
  {
    tf::Profiler profiler;
    CHECK_THROWS_WITH_AS(tf::Profiler(), doctest::Contains("no other Profiler"), tf::Error);
  }
  tf::matmul(tf::randn({2, 2}), tf::randn({2, 2}));  // no profiler alive: nothing to record
  tf::Profiler again;                                // the first one's end freed the slot
  CHECK(again.ops().empty());
}

TEST_CASE("Profiler: ops run while paused are not recorded and their time is left out") {
  const Tensor a = tf::randn({64, 64});
  tf::Profiler profiler;
  tf::matmul(a, a);
  profiler.pause();
  CHECK(profiler.paused());
  profiler.pause();  // already paused: nothing changes
  const double at_pause = profiler.elapsed_seconds();
  // Work while paused: a second product and a wait, neither of which may count.
  tf::matmul(a, a);
  tf::relu(a);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < until) {
  }
  CHECK(profiler.elapsed_seconds() == at_pause);  // the clock stands still
  profiler.resume();
  CHECK_FALSE(profiler.paused());
  profiler.resume();  // already running: nothing changes
  tf::relu(a);
  const auto rows = profiler.ops();
  const tf::OpProfile* mm = find(rows, "matmul");
  REQUIRE(mm != nullptr);
  CHECK(mm->calls == 1);
  const tf::OpProfile* relu = find(rows, "unary relu");
  REQUIRE(relu != nullptr);
  CHECK(relu->calls == 1);
  CHECK(profiler.elapsed_seconds() < at_pause + 0.2);  // the 300 ms wait is not in it

  // reset() while paused keeps it paused, with a clock at zero.
  profiler.pause();
  profiler.reset();
  CHECK(profiler.paused());
  CHECK(profiler.elapsed_seconds() == 0.0);
  tf::matmul(a, a);
  CHECK(profiler.ops().empty());
  profiler.resume();
  tf::matmul(a, a);
  CHECK(profiler.ops().size() == 1);
}

TEST_CASE("Profiler: a paused one that ends frees the slot, and the next one records") {
  {
    tf::Profiler profiler;
    profiler.pause();
  }
  const Tensor a = tf::randn({2, 2});
  tf::Profiler next;
  tf::matmul(a, a);
  const auto rows = next.ops();
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].name == "matmul");
}

TEST_CASE("A linear layer's backward makes no copy: the weight gradient comes out contiguous") {
  Tensor x = tf::randn({5, 3, 4});
  Tensor w = tf::randn({6, 4});  // [out, in], used transposed as in nn::Linear
  x.requires_grad_(true);
  w.requires_grad_(true);
  Tensor y = tf::matmul(x, tf::transpose(w, 0, 1));
  const Tensor r = tf::randn({5, 3, 6});  // sum(y * r): y's gradient is r, a contiguous tensor
  Tensor loss = tf::sum(y * r);
  tf::Profiler profiler(/*by_shape=*/true);
  loss.backward();
  // No copy at all: both gradients come out of their products contiguous and become the leaves'
  // grad as they are. A transposed weight gradient would show as "copy [6x4] strides [1,6]".
  std::vector<std::string> copies;
  for (const tf::OpProfile& op : profiler.ops()) {
    if (op.name.rfind("copy", 0) == 0) copies.push_back(op.name);
  }
  CHECK(copies.empty());
  CHECK(w.grad().is_contiguous());
  CHECK(x.grad().is_contiguous());
}
