// The backend registry: what the linked backends register, how backend(device) and find_backend
// answer, supports() and the dtype lists it feeds into messages, and the errors for a device type
// that no backend serves (made-up device types, registered here by fake backends).
#include <doctest/doctest.h>

#include <string>
#include <tuple>

#include "core/backend.h"
#include "core/error.h"
#include "core/profiler.h"

namespace tinyformer {
namespace {

// A backend that takes float64 only and whose ops all throw: enough to register and look up.
class FakeBackend final : public Backend {
 public:
  explicit FakeBackend(DeviceType type) : type_(type) {}
  const char* name() const override { return "fake"; }
  std::string runtime_info() override { return "fake"; }
  Allocator& allocator() override { fail("fake: no allocator"); }
  void synchronize() override {}
  void memcpy(void*, Device, const void*, Device, std::size_t) override {}
  DeviceType device_type() const override { return type_; }
  bool supports(Op, DType dtype) const override { return dtype == DType::float64; }
#define TF_OP(name, params, args)             \
  void name params override {                 \
    std::ignore = std::forward_as_tuple args; \
    fail("fake: " #name);                     \
  }
#include "core/ops.def"
#undef TF_OP

 private:
  DeviceType type_;
};

}  // namespace
}  // namespace tinyformer

namespace tf = tinyformer;
using tf::Backend;
using tf::BackendEntry;
using tf::DeviceType;
using tf::DType;
using tf::FakeBackend;
using tf::Op;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const tf::Error& e) {
    return e.what();
  }
  return "(no error)";
}

const BackendEntry* entry_named(const std::vector<BackendEntry>& entries, const std::string& name) {
  for (const BackendEntry& e : entries) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

// Device types no Device factory makes, one per case below.
constexpr auto kNoBackend = static_cast<DeviceType>(40);
constexpr auto kFakeDevice = static_cast<DeviceType>(41);
constexpr auto kTwoPrimaries = static_cast<DeviceType>(42);
constexpr auto kProfiled = static_cast<DeviceType>(43);

Backend& fake_on_fake_device() {
  static FakeBackend b(kFakeDevice);
  return b;
}
Backend& fake_profiled() {
  static FakeBackend b(kProfiled);
  return b;
}
Backend& fake_helper_on_missing_device() {
  static FakeBackend b(kNoBackend);
  return b;
}
bool never() {
  return false;
}

}  // namespace

TEST_CASE("registry: the linked backends registered themselves") {
  const std::vector<BackendEntry> entries = tf::registered_backends();
  const BackendEntry* cpu = entry_named(entries, "cpu");
  REQUIRE(cpu != nullptr);
  CHECK(cpu->device == DeviceType::cpu);
  CHECK(cpu->primary);
  CHECK((cpu->available == nullptr || cpu->available()));
  // The CUDA backend, or in a build without it the stub that says so.
  const BackendEntry* cuda = entry_named(entries, "cuda");
  REQUIRE(cuda != nullptr);
  CHECK(cuda->device == DeviceType::cuda);
  CHECK(cuda->primary);
  REQUIRE((cuda->available != nullptr));
  CHECK(cuda->available() == tf::cuda_available());
  CHECK(tf::cuda_available() == tf::device_available(DeviceType::cuda));
  CHECK(tf::device_available(DeviceType::cpu));
  // One primary backend per device type among the backends this build links.
  for (DeviceType type : {DeviceType::cpu, DeviceType::cuda}) {
    int primaries = 0;
    for (const BackendEntry& e : entries) primaries += e.device == type && e.primary ? 1 : 0;
    CHECK(primaries == 1);
  }
}

TEST_CASE("registry: backend(device) and find_backend") {
  Backend& cpu = tf::backend(tf::Device::cpu());
  CHECK(std::string(cpu.name()) == "cpu");
  CHECK(cpu.device_type() == DeviceType::cpu);
  CHECK(tf::find_backend("cpu") == &cpu);
  CHECK(tf::find_backend("no-such-backend") == nullptr);
  CHECK(tf::find_backend("") == nullptr);
  if (tf::cuda_available()) {
    CHECK(std::string(tf::backend(tf::Device::cuda()).name()) == "cuda");
    CHECK(tf::backend(tf::Device::cuda()).device_type() == DeviceType::cuda);
  } else {
    // Registered, but it cannot run here: the backend's own message.
    const std::string message = error_of([] { tf::backend(tf::Device::cuda()); });
    INFO(message);
    CHECK((contains(message, "no usable GPU") || contains(message, "no CUDA backend")));
  }
}

TEST_CASE("registry: supports() and the dtype lists of messages") {
  const Backend& cpu = tf::backend(tf::Device::cpu());
  CHECK(cpu.supports(Op::layer_norm, DType::float32));
  CHECK(cpu.supports(Op::layer_norm, DType::float64));
  CHECK_FALSE(cpu.supports(Op::layer_norm, DType::bfloat16));
  CHECK_FALSE(cpu.supports(Op::layer_norm, DType::int64));
  CHECK(cpu.supports(Op::matmul, DType::bfloat16));
  CHECK(cpu.supports(Op::unary, DType::int64));
  CHECK_FALSE(cpu.supports(Op::unary_backward, DType::int64));
  CHECK(cpu.supports(Op::copy, DType::boolean));
  CHECK_FALSE(cpu.supports(Op::arange, DType::boolean));
  CHECK(cpu.dtype_list(Op::layer_norm) == "float32 or float64");
  CHECK(cpu.dtype_list(Op::matmul) == "float32, float64 or bfloat16");
  CHECK(cpu.dtype_list(Op::reduce) == "float32, float64 or int64");
  FakeBackend fake(kFakeDevice);
  CHECK(fake.dtype_list(Op::softmax) == "float64");
  if (tf::cuda_available()) {
    const Backend& cuda = tf::backend(tf::Device::cuda());
    CHECK(cuda.supports(Op::layer_norm, DType::bfloat16));
    CHECK_FALSE(cuda.supports(Op::adamw_step, DType::bfloat16));
    CHECK(cuda.dtype_list(Op::softmax) == "float32, float64 or bfloat16");
  }
}

TEST_CASE("registry: the checks name the backend's dtypes") {
  Backend& cpu = tf::backend(tf::Device::cpu());
  const tf::Tensor x = tf::zeros({2, 3}, {.dtype = DType::bfloat16});
  const tf::Tensor stats = tf::zeros({2}, {.dtype = DType::bfloat16});
  const std::string message =
      error_of([&] { cpu.layer_norm(x, {}, {}, 1e-5, tf::empty_like(x), stats, stats); });
  INFO(message);
  CHECK(contains(message, "layer_norm: expected float32 or float64, got bfloat16"));
  const tf::Tensor b = tf::zeros({1, 2, 2}, {.dtype = DType::boolean});
  const std::string product = error_of([&] { cpu.matmul(b, b, tf::empty_like(b)); });
  INFO(product);
  CHECK(contains(product, "matmul: expected float32, float64 or bfloat16 operands"));
}

TEST_CASE("registry: a device type without a primary backend is a clear Error") {
  // A helper backend for the type, registered but not primary, does not own its tensors.
  tf::register_backend({.name = "test-helper",
                        .device = kNoBackend,
                        .get = &fake_helper_on_missing_device,
                        .primary = false,
                        .available = nullptr});
  const std::string message = error_of([] { tf::backend(tf::Device{kNoBackend, 0}); });
  INFO(message);
  CHECK(contains(message, "no backend for device type 40"));
  CHECK(contains(message, "cpu (cpu)"));  // it lists what is registered
  CHECK_FALSE(tf::device_available(kNoBackend));
  CHECK(tf::find_backend("test-helper") == &fake_helper_on_missing_device());
}

TEST_CASE("registry: a registered device type, present or not") {
  tf::register_backend({.name = "test-fake",
                        .device = kFakeDevice,
                        .get = &fake_on_fake_device,
                        .primary = true,
                        .available = &never});
  CHECK_FALSE(tf::device_available(kFakeDevice));
  CHECK(&tf::backend(tf::Device{kFakeDevice, 0}) == &fake_on_fake_device());
  CHECK(tf::find_backend("test-fake") == &fake_on_fake_device());
}

TEST_CASE("registry: two primary backends for one device type are an Error") {
  for (const char* name : {"test-first", "test-second"}) {
    tf::register_backend({.name = name,
                          .device = kTwoPrimaries,
                          .get = &fake_on_fake_device,
                          .primary = true,
                          .available = nullptr});
  }
  const std::string message = error_of([] { tf::backend(tf::Device{kTwoPrimaries, 0}); });
  INFO(message);
  CHECK(contains(message, "test-first and test-second"));
  CHECK_THROWS_AS(tf::device_available(kTwoPrimaries), tf::Error);
}

TEST_CASE("registry: an entry without a name or a getter, or under a taken name, is an Error") {
  const auto entry = [](const char* name, tf::Backend& (*get)()) {
    return tf::BackendEntry{
        .name = name, .device = kFakeDevice, .get = get, .primary = false, .available = nullptr};
  };
  const std::string unnamed =
      error_of([&] { tf::register_backend(entry("", &fake_on_fake_device)); });
  CHECK(contains(unnamed, "register_backend: expected a name"));
  const std::string no_getter =
      error_of([&] { tf::register_backend(entry("test-no-getter", nullptr)); });
  CHECK(contains(no_getter, "expected a getter for backend test-no-getter"));
  const std::string taken =
      error_of([&] { tf::register_backend(entry("cpu", &fake_on_fake_device)); });
  CHECK(contains(taken, "a backend named cpu is registered already (for cpu tensors)"));
  // None of them entered the registry.
  CHECK(tf::find_backend("test-no-getter") == nullptr);
  CHECK(tf::find_backend("cpu") == &tf::backend(tf::Device::cpu()));
}

TEST_CASE("registry: the profiler wraps each backend once") {
  Backend& plain = tf::backend(tf::Device::cpu());
  tf::Profiler profiler;
  Backend& wrapped = tf::backend(tf::Device::cpu());
  CHECK(&wrapped != &plain);
  CHECK(&tf::backend(tf::Device::cpu()) == &wrapped);
  CHECK(std::string(wrapped.name()) == "cpu");
  CHECK(wrapped.device_type() == DeviceType::cpu);
  CHECK(wrapped.dtype_list(Op::matmul) == plain.dtype_list(Op::matmul));
  CHECK(tf::find_backend("cpu") == &plain);  // find_backend hands out the backend itself
  // Another backend gets its own wrapper.
  tf::register_backend({.name = "test-profiled",
                        .device = kProfiled,
                        .get = &fake_profiled,
                        .primary = true,
                        .available = nullptr});
  Backend& fake = tf::backend(tf::Device{kProfiled, 0});
  CHECK(&fake != &wrapped);
  CHECK(&fake != &fake_profiled());
  CHECK(fake.device_type() == kProfiled);
  CHECK(std::string(fake.name()) == "fake");
}
