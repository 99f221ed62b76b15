// Tensor basics: factories, deterministic random numbers, views sharing storage, layouts,
// element access, printing and the allocator's memory statistics.
#include <doctest/doctest.h>

#include <cmath>
#include <sstream>

#include "autograd/ops.h"
#include "core/allocator.h"
#include "core/random.h"

namespace tf = tinyformer;
using tf::Tensor;

TEST_CASE("factories: zeros, ones, full, empty") {
  Tensor z = tf::zeros({2, 3});
  CHECK(z.shape() == tf::Shape{2, 3});
  CHECK(z.strides() == tf::Shape{3, 1});
  CHECK(z.dtype() == tf::kFloat32);
  CHECK(z.device() == tf::Device::cpu());
  CHECK(z.numel() == 6);
  CHECK(z.is_contiguous());
  CHECK(z.to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(tf::ones({3}, {.dtype = tf::kFloat64}).to_vector<double>() == std::vector<double>{1, 1, 1});
  CHECK(tf::full({2, 2}, 7.0, {.dtype = tf::kInt64}).to_vector<std::int64_t>() ==
        std::vector<std::int64_t>(4, 7));
  CHECK(tf::full({2}, 1.0, {.dtype = tf::kBool}).to_vector<bool>() ==
        std::vector<bool>{true, true});
  Tensor s = tf::scalar_tensor(2.5);
  CHECK(s.dim() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.item<float>() == 2.5f);
  CHECK(tf::empty({0, 4}).numel() == 0);
  CHECK(tf::zeros_like(s).item<float>() == 0.0f);
  CHECK(tf::full_like(z, 3.0).to_vector<float>() == std::vector<float>(6, 3.0f));
  CHECK(tf::ones_like(z).dtype() == tf::kFloat32);
  CHECK(tf::empty_like(z).shape() == z.shape());
  CHECK(tf::zeros({2}, {.requires_grad = true}).requires_grad());
  CHECK_THROWS_AS(tf::zeros({2, -1}), tf::Error);
  CHECK_THROWS_AS(tf::zeros({2}, {.dtype = tf::kInt64, .requires_grad = true}), tf::Error);
}

TEST_CASE("factories: arange") {
  CHECK(tf::arange(5).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 2, 3, 4});
  CHECK(tf::arange(5).dtype() == tf::kInt64);
  CHECK(tf::arange(1.0, 2.0, 0.25, {.dtype = tf::kFloat64}).to_vector<double>() ==
        std::vector<double>{1.0, 1.25, 1.5, 1.75});
  CHECK(tf::arange(3.0, 0.0, -1.0).to_vector<std::int64_t>() == std::vector<std::int64_t>{3, 2, 1});
  CHECK(tf::arange(0).numel() == 0);
  CHECK_THROWS_WITH_AS(tf::arange(0.0, 1.0, 0.0), doctest::Contains("arange"), tf::Error);
  CHECK_THROWS_AS(tf::arange(0.0, 1.0, -1.0), tf::Error);
}

TEST_CASE("factories: from") {
  Tensor t = tf::from<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(t.dtype() == tf::kFloat64);
  CHECK(t.shape() == tf::Shape{2, 3});
  CHECK(t.data<double>()[4] == 5.0);
  CHECK(tf::from<std::int64_t>({7}, {}).item<std::int64_t>() == 7);
  CHECK(tf::from<bool>({true, false}, {2}).to_vector<bool>() == std::vector<bool>{true, false});
  CHECK(tf::from<float>({1.5f}, {1, 1}).item<float>() == 1.5f);
  CHECK_THROWS_WITH_AS(tf::from<double>({1, 2, 3}, {2, 2}), doctest::Contains("from: shape [2, 2]"),
                       tf::Error);
  CHECK_THROWS_AS(t.data<float>(), tf::Error);
}

TEST_CASE("random numbers repeat under manual_seed") {
  tf::manual_seed(123);
  const auto a = tf::randn({1000}).to_vector<float>();
  const auto b = tf::rand({5}, {.dtype = tf::kFloat64}).to_vector<double>();
  tf::manual_seed(123);
  CHECK(tf::randn({1000}).to_vector<float>() == a);
  CHECK(tf::rand({5}, {.dtype = tf::kFloat64}).to_vector<double>() == b);
  // The next draw continues the stream instead of repeating it.
  CHECK(tf::randn({1000}).to_vector<float>() != a);
  tf::manual_seed(124);
  CHECK(tf::randn({1000}).to_vector<float>() != a);

  // Moments of 1000 standard normals and of uniform [0, 1) numbers.
  double sum = 0, sum_sq = 0;
  for (float v : a) {
    sum += v;
    sum_sq += static_cast<double>(v) * v;
  }
  CHECK(std::abs(sum / 1000) < 0.15);
  CHECK(std::abs(sum_sq / 1000 - 1.0) < 0.2);
  tf::manual_seed(5);
  for (double v : tf::rand({200}, {.dtype = tf::kFloat64}).to_vector<double>()) {
    CHECK((v >= 0.0 && v < 1.0));
  }
  CHECK_THROWS_AS(tf::randn({2}, {.dtype = tf::kInt64}), tf::Error);
}

TEST_CASE("a draw depends only on seed and offset, not on how it is split") {
  tf::manual_seed(77);
  const auto whole = tf::rand({10}).to_vector<float>();
  tf::manual_seed(77);
  auto first = tf::rand({4}).to_vector<float>();
  const auto rest = tf::rand({6}).to_vector<float>();
  first.insert(first.end(), rest.begin(), rest.end());
  CHECK(first == whole);
}

TEST_CASE("views share storage: writes through a view reach the base") {
  Tensor base = tf::zeros({3, 4}, {.dtype = tf::kFloat64});
  Tensor row = base.select(0, 1);
  Tensor col = base.select(1, 2);
  Tensor t = base.transpose(0, 1);
  CHECK(row.storage() == base.storage());
  tf::raw::fill(row, 5.0);
  tf::raw::fill(col, 9.0);
  // row 1 is 5 except where column 2 crosses it.
  CHECK(base.to_vector<double>() == std::vector<double>{0, 0, 9, 0, 5, 5, 9, 5, 0, 0, 9, 0});
  // ...and the base's values are seen through every view.
  CHECK(t.select(0, 2).to_vector<double>() == std::vector<double>{9, 9, 9});
  base.data<double>()[0] = -1.0;
  CHECK(t.to_vector<double>()[0] == -1.0);
  CHECK(base.view({12}).to_vector<double>()[0] == -1.0);
  // A clone does not share.
  Tensor c = base.clone();
  base.data<double>()[1] = 42.0;
  CHECK(c.to_vector<double>()[1] == 0.0);
}

TEST_CASE("reshape is a view when the layout allows, a copy otherwise") {
  Tensor x = tf::arange(0.0, 6.0, 1.0, {.dtype = tf::kFloat64}).view({2, 3});
  Tensor v = x.reshape({3, 2});
  CHECK(v.storage() == x.storage());
  Tensor t = x.transpose(0, 1);  // [3, 2], not row-major
  Tensor r = t.reshape({6});
  CHECK(r.storage() != x.storage());
  CHECK(r.to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});
  CHECK_THROWS_WITH_AS(t.view({6}), doctest::Contains("reshape"), tf::Error);
}

TEST_CASE("strides of transpose, permute, slice, expand") {
  Tensor x = tf::zeros({2, 3, 4});
  CHECK(x.strides() == tf::Shape{12, 4, 1});
  Tensor t = x.transpose(0, 1);
  CHECK(t.shape() == tf::Shape{3, 2, 4});
  CHECK(t.strides() == tf::Shape{4, 12, 1});
  CHECK_FALSE(t.is_contiguous());
  CHECK(x.permute({2, 0, 1}).strides() == tf::Shape{1, 12, 4});
  Tensor s = x.slice(1, 1, 3);
  CHECK(s.shape() == tf::Shape{2, 2, 4});
  CHECK(s.strides() == tf::Shape{12, 4, 1});
  CHECK(s.offset() == 4);
  Tensor s2 = x.slice(2, 0, 4, 3);
  CHECK(s2.shape() == tf::Shape{2, 3, 2});
  CHECK(s2.strides() == tf::Shape{12, 4, 3});
  Tensor e = tf::zeros({3, 1}).expand({2, 3, 5});
  CHECK(e.shape() == tf::Shape{2, 3, 5});
  CHECK(e.strides() == tf::Shape{0, 1, 0});
  CHECK(e.numel() == 30);
  CHECK(x.size(-1) == 4);
  CHECK(x.stride(-3) == 12);
  CHECK_THROWS_AS(x.size(3), tf::Error);
}

TEST_CASE("item and to_vector") {
  Tensor x = tf::from<double>({1.5, -2.0, 3.25}, {3});
  CHECK(x.to_vector<double>() == std::vector<double>{1.5, -2.0, 3.25});
  CHECK(x.to_vector<float>() == std::vector<float>{1.5f, -2.0f, 3.25f});  // converts
  CHECK(x.select(0, 2).item<double>() == 3.25);
  CHECK(x.slice(0, 0, 3, 2).to_vector<double>() == std::vector<double>{1.5, 3.25});
  CHECK_THROWS_WITH_AS(x.item<double>(),
                       doctest::Contains("item: expected a tensor with one element"), tf::Error);
  CHECK_THROWS_AS(Tensor().to_vector<double>(), tf::Error);
  CHECK_THROWS_AS(Tensor().shape(), tf::Error);
  CHECK_FALSE(Tensor().defined());
}

TEST_CASE("printing shows shape, dtype and values") {
  std::ostringstream os;
  os << tf::from<double>({1, 2, 3, 4}, {2, 2});
  const std::string s = os.str();
  CHECK(s.find("shape=[2, 2]") != std::string::npos);
  CHECK(s.find("float64") != std::string::npos);
  CHECK(s.find("[[1, 2],") != std::string::npos);
  std::ostringstream os2;
  os2 << tf::arange(20);
  CHECK(os2.str().find("int64") != std::string::npos);
  CHECK(os2.str().find("...") != std::string::npos);  // long rows are elided
  std::ostringstream os3;
  os3 << Tensor();
  CHECK(os3.str() == "Tensor(undefined)");
  std::ostringstream os4;
  os4 << tf::zeros({1}, {.requires_grad = true});
  CHECK(os4.str().find("requires_grad") != std::string::npos);
}

TEST_CASE("memory statistics count current and peak bytes") {
  tf::reset_peak_memory();
  const tf::MemoryStats before = tf::memory_stats();
  CHECK(before.peak_bytes == before.current_bytes);
  constexpr std::int64_t n = 4 << 20;  // 16 MiB of float32
  {
    Tensor big = tf::empty({n});
    const tf::MemoryStats during = tf::memory_stats();
    CHECK(during.current_bytes == before.current_bytes + 4 * n);
    CHECK(during.peak_bytes >= during.current_bytes);
    CHECK(during.allocation_count == before.allocation_count + 1);
  }
  const tf::MemoryStats after = tf::memory_stats();
  CHECK(after.current_bytes == before.current_bytes);
  CHECK(after.peak_bytes >= before.current_bytes + 4 * n);  // the peak remembers
  tf::reset_peak_memory();
  CHECK(tf::memory_stats().peak_bytes == tf::memory_stats().current_bytes);
  // A view allocates nothing.
  Tensor x = tf::zeros({64});
  const auto count = tf::memory_stats().allocation_count;
  Tensor v = x.view({8, 8}).transpose(0, 1);
  CHECK(tf::memory_stats().allocation_count == count);
  CHECK(v.storage() == x.storage());
}
