// Collectives across the processes of the job: all-reduce (sum, mean, asynchronous) and
// broadcast of every dtype, odd sizes and views that are not contiguous, and their errors.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "autograd/ops.h"
#include "core/error.h"
#include "nn/distributed/distributed.h"

namespace tf = tinyformer;
namespace dist = tinyformer::distributed;
using tf::Tensor;

namespace {

// Element i on rank r: (r + 1) * (i % 13) - i % 5, small integers, exact in every dtype.
double value(int r, std::int64_t i) {
  return static_cast<double>((r + 1) * (i % 13) - i % 5);
}

Tensor rank_values(std::int64_t n, tf::DType dtype, int r) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = value(r, i);
  return tf::raw::to_dtype(tf::from<double>(v, {n}), dtype);
}

std::vector<double> as_double(const Tensor& t) {
  return tf::raw::to_dtype(t.contiguous(), tf::DType::float64).to_vector<double>();
}

}  // namespace

TEST_CASE("job: two ranks, distinct and in range") {
  REQUIRE(dist::is_initialized());
  REQUIRE(dist::world_size() == 2);
  CHECK(dist::rank() >= 0);
  CHECK(dist::rank() < 2);
  CHECK(dist::all_reduce_max(dist::rank()) == 1);
  CHECK(dist::all_reduce_min(dist::rank()) == 0);
  dist::barrier();
}

TEST_CASE("all_reduce: sum of every dtype, odd sizes, contiguous or not") {
  const int world = dist::world_size();
  for (tf::DType dtype :
       {tf::DType::float32, tf::DType::float64, tf::DType::bfloat16, tf::DType::int64}) {
    for (std::int64_t n : {1, 7, 1031}) {
      CAPTURE(dtype);
      CAPTURE(n);
      Tensor t = rank_values(n, dtype, dist::rank());
      dist::all_reduce(t);
      CHECK(t.dtype() == dtype);
      const std::vector<double> got = as_double(t);
      for (std::int64_t i = 0; i < n; ++i) {
        double expected = 0;
        for (int r = 0; r < world; ++r) expected += value(r, i);
        REQUIRE(got[static_cast<std::size_t>(i)] == expected);
      }
    }
  }
  // A transposed view [5, 3] of a [3, 5] tensor: reduced in place through its own layout.
  Tensor base = rank_values(15, tf::DType::float32, dist::rank()).view({3, 5});
  Tensor view = base.transpose(0, 1);
  dist::all_reduce(view);
  const std::vector<double> got = as_double(base.view({15}));
  for (std::int64_t i = 0; i < 15; ++i) {
    CHECK(got[static_cast<std::size_t>(i)] == value(0, i) + value(1, i));
  }
}

TEST_CASE("all_reduce: mean, bool as logical or, asynchronous") {
  Tensor t = rank_values(9, tf::DType::float64, dist::rank());
  dist::all_reduce(t, dist::Reduction::mean);
  const std::vector<double> got = t.to_vector<double>();
  for (std::int64_t i = 0; i < 9; ++i) {
    CHECK(got[static_cast<std::size_t>(i)] == (value(0, i) + value(1, i)) / 2);
  }
  Tensor bf = rank_values(9, tf::DType::bfloat16, dist::rank());
  dist::all_reduce(bf, dist::Reduction::mean);
  CHECK(as_double(bf) == got);  // halves of small integers are exact in bfloat16

  // Rank 0: true at even i; rank 1: true at multiples of 3.
  std::vector<double> flags(11);
  for (std::size_t i = 0; i < flags.size(); ++i) {
    flags[i] = dist::rank() == 0 ? (i % 2 == 0) : (i % 3 == 0);
  }
  Tensor b = tf::raw::to_dtype(tf::from<double>(flags, {11}), tf::DType::boolean);
  dist::all_reduce(b);
  CHECK(b.dtype() == tf::DType::boolean);
  const std::vector<double> any = as_double(b);
  for (std::size_t i = 0; i < any.size(); ++i) {
    CHECK(any[i] == ((i % 2 == 0 || i % 3 == 0) ? 1.0 : 0.0));
  }

  // Two reductions in flight at once, waited for in the other order.
  Tensor x = rank_values(1001, tf::DType::float32, dist::rank());
  Tensor y = rank_values(3, tf::DType::int64, dist::rank());
  dist::Work wx = dist::all_reduce_async(x);
  dist::Work wy = dist::all_reduce_async(y, dist::Reduction::sum);
  wy.wait();
  wx.wait();
  CHECK(wx.test());
  CHECK(as_double(x)[1000] == value(0, 1000) + value(1, 1000));
  CHECK(as_double(y)[2] == value(0, 2) + value(1, 2));
}

TEST_CASE("broadcast: every dtype from either root, odd sizes, views") {
  for (int root : {0, 1}) {
    for (tf::DType dtype : {tf::DType::float32, tf::DType::float64, tf::DType::bfloat16,
                            tf::DType::int64, tf::DType::boolean}) {
      CAPTURE(root);
      CAPTURE(dtype);
      Tensor t = rank_values(1031, dtype, dist::rank());
      dist::broadcast(t, root);
      CHECK(as_double(t) == as_double(rank_values(1031, dtype, root)));
    }
  }
  Tensor base = rank_values(12, tf::DType::float64, dist::rank()).view({3, 4});
  Tensor column = base.select(1, 2);  // stride 4
  dist::broadcast(column, 1);
  const std::vector<double> got = base.view({12}).to_vector<double>();
  for (std::int64_t i = 0; i < 12; ++i) {
    CHECK(got[static_cast<std::size_t>(i)] == (i % 4 == 2 ? value(1, i) : value(dist::rank(), i)));
  }
  CHECK(dist::broadcast_string(dist::rank() == 1 ? "from one" : "", 1) == "from one");
}

TEST_CASE("collectives: bad arguments are errors on every rank, before any communication") {
  Tensor i = rank_values(4, tf::DType::int64, dist::rank());
  CHECK_THROWS_WITH_AS(dist::all_reduce(i, dist::Reduction::mean),
                       "all_reduce: mean needs a floating dtype, got int64; use Reduction::sum",
                       tf::Error);
  CHECK_THROWS_WITH_AS(dist::broadcast(i, 2), "broadcast: expected a root rank in [0, 2), got 2",
                       tf::Error);
  CHECK_THROWS_WITH_AS(dist::all_reduce(Tensor()),
                       "all_reduce: expected a defined tensor, got an undefined one", tf::Error);
  // Still in step afterwards.
  CHECK(dist::all_reduce_max(7) == 7);
}
