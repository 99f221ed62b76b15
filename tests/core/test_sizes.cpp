// Size arithmetic (core/checked.h): shapes, strides, byte sizes, offsets and view bounds that
// would overflow an int64 are Errors naming the op and the shape; requests too large for memory
// are OutOfMemory errors naming the op, the shape and the bytes; and the views and factories
// that sit next to those limits still work.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <new>
#include <string>
#include <tuple>

#include "autograd/ops.h"
#include "core/allocator.h"
#include "core/backend.h"
#include "core/checked.h"
#include "core/error.h"

namespace tf = tinyformer;
using tf::Shape;
using tf::Tensor;

namespace {

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t k2_31 = std::int64_t{1} << 31, k2_32 = std::int64_t{1} << 32;
constexpr std::int64_t k2_40 = std::int64_t{1} << 40;

// The message of the Error `f` throws ("(no error)" when it returns normally).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const tf::Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("checked arithmetic: add_overflows, mul_overflows, checked_add, checked_mul") {
  std::int64_t out = 0;
  CHECK_FALSE(tf::mul_overflows(k2_31, k2_31, out));
  CHECK(out == std::int64_t{1} << 62);
  CHECK(tf::mul_overflows(k2_32, k2_31, out));
  CHECK(tf::mul_overflows(kMin, -1, out));
  CHECK_FALSE(tf::add_overflows(kMax, kMin, out));
  CHECK(out == -1);
  CHECK(tf::add_overflows(kMax, 1, out));
  CHECK(tf::checked_mul(3, 4, "op", {3, 4}) == 12);
  CHECK(tf::checked_add(3, 4, "op", {3, 4}) == 7);
  const std::string message = error_of([] { tf::checked_mul(kMax, 2, "test_op", {kMax, 2}); });
  CHECK(message ==
        "test_op: shape [9223372036854775807, 2] is too large "
        "(9223372036854775807 * 2 overflows a 64-bit integer)");
  CHECK(contains(error_of([] { tf::checked_add(kMax, 1, "test_op", {1}); }),
                 "test_op: shape [1] is too large (9223372036854775807 + 1 overflows"));
}

TEST_CASE("shape_numel and contiguous_strides count zeros as 1 against overflow") {
  CHECK(tf::shape_numel({}) == 1);
  CHECK(tf::shape_numel({0, k2_31, k2_31}) == 0);
  CHECK(tf::contiguous_strides({0, k2_31, k2_31}) == Shape{std::int64_t{1} << 62, k2_31, 1});
  // A zero does not hide the overflow of the other sizes' product: the strides would overflow.
  CHECK(contains(error_of([] {
                   tf::shape_numel({0, k2_32, k2_32}, "op");
                 }),
                 "op: shape [0, 4294967296, 4294967296] is too large"));
  CHECK(contains(error_of([] {
                   tf::contiguous_strides({0, k2_32, k2_32}, "op");
                 }),
                 "op: shape [0, 4294967296, 4294967296] is too large"));
  CHECK(contains(error_of([] { tf::shape_numel({k2_40, k2_40}); }), "numel: shape"));
}

TEST_CASE("factories: an element count or byte size that overflows is an Error, not a wrap") {
  // Each of these wrapped to a 64-byte block that was then filled: a heap overflow.
  CHECK(error_of([] { tf::zeros({std::int64_t{1} << 62}); }) ==
        "zeros: shape [4611686018427387904] is too large (4611686018427387904 * 4 overflows a "
        "64-bit integer)");
  CHECK(contains(error_of([] { tf::randn({std::int64_t{1} << 62}); }),
                 "randn: shape [4611686018427387904] is too large"));
  CHECK(contains(error_of([] { tf::ones({std::int64_t{1} << 61}, {.dtype = tf::kFloat64}); }),
                 "ones: shape [2305843009213693952] is too large"));
  // 2^80 elements wrapped to 0: a tensor of that shape came back with no storage at all.
  CHECK(contains(error_of([] {
                   tf::randn({k2_40, k2_40});
                 }),
                 "randn: shape [1099511627776, 1099511627776] is too large"));
  CHECK(contains(error_of([] { tf::full({k2_40, k2_40}, 1.0); }), "full: shape"));
  CHECK(contains(error_of([] {
                   tf::empty({0, k2_32, k2_32});
                 }),
                 "empty: shape [0, 4294967296, 4294967296] is too large"));
  CHECK(contains(error_of([] { tf::from<float>({}, {0, k2_32, k2_32}); }), "from: shape"));
  CHECK(contains(error_of([] { tf::empty({2, -1}); }), "empty: expected non-negative sizes"));
}

TEST_CASE("factories: a request above the cap of one tensor is OutOfMemory naming the bytes") {
  // 2^39 float32 elements: 2^41 bytes, no overflow, twice the cap.
  const Shape shape{std::int64_t{1} << 39};
  const std::string message = error_of([&] { tf::empty(shape); });
  CHECK(message ==
        "empty: out of memory: shape [549755813888] float32 asked for 2199023255552 bytes "
        "(more than the 1099511627776 bytes, 1 TiB, that one tensor may hold)");
  // One element above the cap (2^38 float32 elements) is refused before any allocator sees it.
  CHECK(contains(error_of([] { tf::empty({(std::int64_t{1} << 38) + 1}); }),
                 "asked for 1099511627780 bytes (more than"));
  CHECK_THROWS_AS(tf::randn(shape), tf::OutOfMemory);
  CHECK(contains(error_of([&] {
                   tf::zeros({k2_40, 1 << 8}, {.dtype = tf::kInt64});
                 }),
                 "zeros: out of memory: shape [1099511627776, 256] int64 asked for "
                 "2251799813685248 bytes"));
  CHECK(tf::empty({0, std::int64_t{1} << 62}).numel() == 0);  // no byte asked for
  // The same check for code that fills a host vector before it makes the tensor.
  CHECK(tf::storage_bytes({2, 3}, tf::kFloat64, "op") == 48);
  CHECK_THROWS_AS(tf::storage_bytes(shape, tf::kFloat32, "op"), tf::OutOfMemory);
  CHECK(contains(error_of([] {
                   tf::storage_bytes({k2_40, k2_40}, tf::kBool, "op");
                 }),
                 "op: shape [1099511627776, 1099511627776] is too large"));
}

namespace tinyformer {
namespace {

// An allocator that fails every request, the way the system's or a device's does.
class FailingAllocator final : public Allocator {
 public:
  explicit FailingAllocator(bool bad_alloc) : bad_alloc_(bad_alloc) {}
  void* allocate(std::size_t bytes) override {
    if (bad_alloc_) throw std::bad_alloc();
    throw OutOfMemory(detail::concat("fake: out of memory allocating ", bytes, " bytes"));
  }
  void deallocate(void*, std::size_t) override {}
  MemoryStats stats() const override { return {}; }
  void reset_peak() override {}
  void empty_cache() override {}

 private:
  bool bad_alloc_;
};

// A backend whose allocator always fails; its ops are never reached.
class NoMemoryBackend final : public Backend {
 public:
  NoMemoryBackend(DeviceType type, bool bad_alloc) : type_(type), allocator_(bad_alloc) {}
  const char* name() const override { return "no-memory"; }
  std::string runtime_info() override { return "no-memory"; }
  Allocator& allocator() override { return allocator_; }
  void synchronize() override {}
  void memcpy(void*, Device, const void*, Device, std::size_t) override {}
  DeviceType device_type() const override { return type_; }
  bool supports(Op, DType) const override { return true; }
#define TF_OP(name, params, args)             \
  void name params override {                 \
    std::ignore = std::forward_as_tuple args; \
    fail("no-memory: " #name);                \
  }
#include "core/ops.def"
#undef TF_OP

 private:
  DeviceType type_;
  FailingAllocator allocator_;
};

// Device types no Device factory makes (the registry test uses 40 to 43).
constexpr auto kBadAllocDevice = static_cast<DeviceType>(50);
constexpr auto kOutOfMemoryDevice = static_cast<DeviceType>(51);

Backend& bad_alloc_backend() {
  static NoMemoryBackend b(kBadAllocDevice, true);
  return b;
}
Backend& out_of_memory_backend() {
  static NoMemoryBackend b(kOutOfMemoryDevice, false);
  return b;
}

}  // namespace
}  // namespace tinyformer

TEST_CASE("factories: an allocation the allocator cannot serve is OutOfMemory naming the op") {
  tf::register_backend({.name = "test-bad-alloc",
                        .device = tf::kBadAllocDevice,
                        .get = &tf::bad_alloc_backend,
                        .primary = true,
                        .available = nullptr});
  tf::register_backend({.name = "test-out-of-memory",
                        .device = tf::kOutOfMemoryDevice,
                        .get = &tf::out_of_memory_backend,
                        .primary = true,
                        .available = nullptr});
  const tf::Device bad_alloc{tf::kBadAllocDevice, 0}, out_of_memory{tf::kOutOfMemoryDevice, 0};
  // std::bad_alloc from the allocator does not escape as a foreign exception.
  const std::string a = error_of([&] { tf::empty({2, 3}, {.device = bad_alloc}); });
  CHECK(a ==
        "empty: out of memory: shape [2, 3] float32 asked for 24 bytes (the allocator "
        "failed)");
  CHECK_THROWS_AS(tf::zeros({2, 3}, {.device = bad_alloc}), tf::OutOfMemory);
  // An allocator's own OutOfMemory keeps its account of the device.
  const std::string b =
      error_of([&] { tf::randn({4}, {.dtype = tf::kFloat64, .device = out_of_memory}); });
  CHECK(b ==
        "randn: out of memory: shape [4] float64 asked for 32 bytes (fake: out of memory "
        "allocating 32 bytes)");
}

TEST_CASE("reshape and view: a shape whose size overflows is an Error") {
  const Tensor t = tf::zeros({4});
  CHECK(contains(error_of([&] {
                   t.reshape({kMax, 2});
                 }),
                 "reshape: shape [9223372036854775807, 2] is too large"));
  CHECK(contains(error_of([&] { t.view({2, kMax, 2}); }), "view: shape"));
  CHECK(contains(error_of([&] { t.reshape({-1, kMax}); }), "is invalid for a tensor of 4"));
  CHECK(contains(error_of([&] {
                   tf::empty({0}).reshape({0, k2_32, k2_32});
                 }),
                 "reshape: shape [0, 4294967296, 4294967296] is too large"));
  CHECK(contains(error_of([&] {
                   tf::empty({0}).view({k2_32, -1, k2_32});
                 }),
                 "view: shape [4294967296, -1, 4294967296] is too large"));
  CHECK(tf::empty({0}).reshape({0, k2_31, k2_31}).numel() == 0);
}

TEST_CASE("slice and narrow with extreme bounds and steps") {
  const Tensor t = tf::arange(0, 4, 1, {.dtype = tf::kFloat32});
  // A step past the end keeps one element (ceil(4 / step) was computed as 0 by overflow).
  const Tensor one = t.slice(0, 0, 4, kMax);
  CHECK(one.shape() == Shape{1});
  CHECK(one.to_vector<float>() == std::vector<float>{0});
  CHECK(t.slice(0, 1, kMax, kMax).to_vector<float>() == std::vector<float>{1});
  CHECK(t.slice(0, kMin, kMax).to_vector<float>() == std::vector<float>{0, 1, 2, 3});
  CHECK(t.slice(0, kMax, kMin).numel() == 0);
  CHECK(t.slice(0, 1, 4, 2).to_vector<float>() == std::vector<float>{1, 3});
  CHECK(contains(error_of([&] { t.narrow(0, 1, kMax); }), "narrow: expected 0 <= length <= 3"));
  CHECK(contains(error_of([&] { t.narrow(0, kMin, 1); }), "narrow: start"));
  CHECK(contains(error_of([&] { t.narrow(0, kMax, 1); }), "narrow: start"));
  // The gradient of a slice with a huge step lands in the right place.
  const Tensor x = tf::arange(0, 4, 1, {.dtype = tf::kFloat64}).requires_grad_();
  x.slice(0, 2, 4, kMax).sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 0, 1, 0});
}

TEST_CASE("windows of an empty tensor whose strides are huge stay valid") {
  // Contiguous strides [2^62, 2^31, 1]: a window far along a dim starts at offset 2^62, past
  // the (empty) storage; its data pointer is the storage's, not one computed out of bounds.
  const Tensor e = tf::empty({0, k2_31, k2_31});
  const Tensor w = e.narrow(1, k2_31, 0);
  CHECK(w.offset() == std::int64_t{1} << 62);
  CHECK(w.numel() == 0);
  CHECK(w.data_ptr() == e.storage()->data());
  CHECK(e.slice(2, 1, kMax, kMax).shape() == Shape{0, k2_31, 1});
  CHECK(e.unsqueeze(1).numel() == 0);
  CHECK(tf::cat({e, e}, 0).numel() == 0);
  CHECK(e.contiguous().numel() == 0);
}

TEST_CASE("expand, broadcasting and cat: output sizes that overflow are Errors") {
  const Tensor s = tf::ones({1, 1});
  CHECK(contains(error_of([&] {
                   s.expand({k2_40, k2_40});
                 }),
                 "expand: shape [1099511627776, 1099511627776] is too large"));
  // Each operand fits (a stride-0 view), their broadcast does not.
  const Tensor column = s.expand({k2_40, 1}), row = s.expand({1, k2_40});
  CHECK(column.numel() == k2_40);
  CHECK(contains(error_of([&] { tf::add(column, row); }), "shape [1099511627776, 1099511627776]"));
  CHECK(contains(error_of([&] { tf::matmul(column, row); }),
                 "matmul: shape [1099511627776, 1099511627776] is too large"));
  const Tensor big = tf::empty({std::int64_t{1} << 62, 0});
  CHECK(contains(error_of([&] { tf::cat({big, big}, 0); }), "cat: shape"));
  CHECK(tf::cat({big, tf::empty({1, 0})}, 0).shape() == Shape{(std::int64_t{1} << 62) + 1, 0});
}

TEST_CASE("as_strided: a view whose extent overflows reaches outside the storage") {
  const Tensor base = tf::zeros({4});
  CHECK(contains(error_of([&] {
                   tf::raw::as_strided(base, {2, 2}, {kMax, 1}, 0);
                 }),
                 "as_strided: the view [2, 2] with strides [9223372036854775807, 1]"));
  CHECK(contains(error_of([&] { tf::raw::as_strided(base, {3}, {kMin / 2}, 0); }),
                 "reaches outside"));
  CHECK(contains(error_of([&] { tf::raw::as_strided(base, {2}, {1}, kMax); }), "reaches outside"));
  CHECK(contains(error_of([&] {
                   tf::raw::as_strided(base, {k2_32, k2_32}, {0, 0}, 0, "my_op");
                 }),
                 "my_op: shape [4294967296, 4294967296] is too large"));
  // An empty view reaches nothing, whatever its strides.
  CHECK(tf::raw::as_strided(base, {0, 3}, {kMax, kMax}, 0).numel() == 0);
}

TEST_CASE("arange: infinite or unrepresentable lengths are Errors") {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(contains(error_of([&] { tf::arange(0, inf); }),
                 "arange: expected finite start, end and step, got 0, inf and 1"));
  CHECK(contains(error_of([&] { tf::arange(nan, 1); }), "arange: expected finite"));
  CHECK(contains(error_of([&] { tf::arange(0, 1, inf); }), "arange: expected finite"));
  CHECK(contains(error_of([&] { tf::arange(0, 1e300); }), "more than a 64-bit size can count"));
  CHECK(contains(error_of([&] { tf::arange(0, 1e18); }),
                 "arange: out of memory: shape [1000000000000000000] int64 asked for "
                 "8000000000000000000 bytes"));
  CHECK(contains(error_of([&] { tf::arange(0, 1, -1); }), "never reaches"));
  CHECK(tf::arange(0, 3).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 2});
  CHECK(tf::arange(0, 0).numel() == 0);
}

TEST_CASE("conv1d and embedding: sizes derived from huge arguments are checked") {
  const Tensor x = tf::zeros({1, 1, 4}), w = tf::zeros({1, 1, 3});
  CHECK(contains(error_of([&] { tf::conv1d(x, w, Tensor(), 1, kMax); }),
                 "conv1d: shape [1, 1, 4] is too large"));
  CHECK(contains(error_of([&] { tf::conv1d(x, w, Tensor(), 1, kMax / 2); }), "conv1d: shape"));
  // [2^40] indices into a [2, 2^40] table (stride-0 views, no memory): a [2^40, 2^40] output.
  const Tensor table = tf::zeros({1, 1}).expand({2, k2_40});
  const Tensor indices = tf::zeros({1}, {.dtype = tf::kInt64}).expand({k2_40});
  CHECK(contains(error_of([&] { tf::embedding(table, indices); }),
                 "embedding: shape [1099511627776, 1099511627776] is too large"));
}
