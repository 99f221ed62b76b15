// Memory and creation ops on the GPU against the CPU backend (fill, copy with every dtype pair
// and layout, arange, random), transfers between the devices, the caching device allocator's
// statistics and out-of-memory error, and the error a machine without a GPU gives.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/random.h"
#include "parity.h"

namespace {

using namespace tinyformer;
using parity::Layout;
using parity::Pair;

TF_PARITY_COVERS(fill);
TF_PARITY_COVERS(copy);
TF_PARITY_COVERS(arange);
TF_PARITY_COVERS(random);

const std::vector<DType> kAllDtypes = {DType::float32, DType::float64, DType::bfloat16,
                                       DType::int64, DType::boolean};
const std::vector<DType> kFloating = {DType::float32, DType::float64, DType::bfloat16};

// The whole storage under a view, as a flat tensor: a kernel that writes outside its view (into
// the gaps of a sliced view, say) shows up here.
Tensor whole(const Tensor& view) {
  const auto count =
      static_cast<std::int64_t>(view.storage()->nbytes() / element_size(view.dtype()));
  return raw::as_strided(view, {count}, {1}, 0);
}

void check_whole(const Pair& p, const std::string& what) {
  parity::check_close(whole(p.cuda), whole(p.cpu), what + ", whole storage", 0.0, 0.0);
}

std::string describe(const std::string& op, DType a, DType b, Layout layout, const Shape& shape) {
  return op + " " + dtype_name(a) + " -> " + dtype_name(b) + " " + parity::layout_name(layout) +
         " " + shape_str(shape);
}

// The same host values as a tensor of `dtype` on both devices (converted by the CPU backend).
Pair pair_of(const std::vector<double>& values, DType dtype) {
  const Tensor host =
      raw::to_dtype(from<double>(values, {static_cast<std::int64_t>(values.size())}), dtype);
  return {host, raw::to_device(host, Device::cuda())};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("fill: every dtype, contiguous, transposed, sliced and broadcast outputs") {
  if (!parity::gpu()) return;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : kAllDtypes) {
    for (Layout layout :
         {Layout::contiguous, Layout::transposed, Layout::sliced, Layout::broadcast}) {
      for (const Shape& shape : {Shape{1, 1}, Shape{7, 33}, Shape{3, 65, 129}}) {
        for (double value : {0.0, -0.0, -1.5, 0.1, 1e30, nan}) {
          Pair out = parity::make_pair(shape, dtype, layout, 3);
          parity::cuda_be().fill(out.cuda, value);
          parity::cpu_be().fill(out.cpu, value);
          check_whole(out, describe("fill " + std::to_string(value), dtype, dtype, layout, shape));
        }
      }
    }
  }
}

TEST_CASE("copy: every dtype pair from contiguous, transposed, sliced and broadcast sources") {
  if (!parity::gpu()) return;
  // {70, 1030}: the tiled transpose with partial tiles on both sides; {3, 65, 129}: with planes.
  for (const Shape& shape : {Shape{1, 1}, Shape{7, 33}, Shape{3, 65, 129}, Shape{70, 1030}}) {
    for (Layout layout :
         {Layout::contiguous, Layout::transposed, Layout::sliced, Layout::broadcast}) {
      for (DType from_dtype : kAllDtypes) {
        const Pair src = parity::make_pair(shape, from_dtype, layout, 11, -3.0, 3.0);
        for (DType to_dtype : kAllDtypes) {
          Pair dst = parity::make_output(shape, to_dtype);
          parity::cuda_be().copy(src.cuda, dst.cuda);
          parity::cpu_be().copy(src.cpu, dst.cpu);
          // The conversions are the same functions on both devices: exact.
          parity::check_close(dst, describe("copy", from_dtype, to_dtype, layout, shape), 0.0, 0.0);
        }
      }
    }
  }
}

TEST_CASE("copy: special values convert by the CPU's rules") {
  if (!parity::gpu()) return;
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> values = {std::numeric_limits<double>::quiet_NaN(),
                                      inf,
                                      -inf,
                                      1e30,
                                      -1e30,
                                      9.3e18,
                                      -9.3e18,
                                      2.5,
                                      -2.5,
                                      -0.0,
                                      0.0,
                                      1e-40,
                                      1e-300,
                                      3.5e38,
                                      1.0 + std::ldexp(1.0, -8),
                                      1.0 + 3 * std::ldexp(1.0, -8),
                                      1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30),
                                      16777217.0,
                                      257.0};
  for (DType from_dtype : {DType::float64, DType::float32, DType::bfloat16}) {
    const Pair src = pair_of(values, from_dtype);
    for (DType to_dtype : kAllDtypes) {
      const Shape shape = {static_cast<std::int64_t>(values.size())};
      Pair dst = parity::make_output(shape, to_dtype);
      parity::cuda_be().copy(src.cuda, dst.cuda);
      parity::cpu_be().copy(src.cpu, dst.cpu);
      parity::check_close(dst, describe("copy", from_dtype, to_dtype, Layout::contiguous, shape),
                          0.0, 0.0);
    }
  }
  // int64 extremes into every dtype.
  const Pair ints = parity::make_from(
      {std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::min(), -1, 0,
       257, 16777217, (std::int64_t{1} << 53) + 1},
      {7});
  for (DType to_dtype : kAllDtypes) {
    Pair dst = parity::make_output({7}, to_dtype);
    parity::cuda_be().copy(ints.cuda, dst.cuda);
    parity::cpu_be().copy(ints.cpu, dst.cpu);
    parity::check_close(dst, describe("copy", DType::int64, to_dtype, Layout::contiguous, {7}), 0.0,
                        0.0);
  }
}

TEST_CASE("copy: strided destinations, permutes, expands and unaligned views") {
  if (!parity::gpu()) return;
  for (DType dtype : {DType::float32, DType::bfloat16, DType::int64}) {
    // Into transposed and sliced destinations: the gaps of the sliced one stay as they were.
    for (Layout dst_layout : {Layout::transposed, Layout::sliced}) {
      for (Layout src_layout : {Layout::contiguous, Layout::transposed, Layout::broadcast}) {
        const Shape shape = {5, 37, 41};
        const Pair src = parity::make_pair(shape, DType::float32, src_layout, 21);
        Pair dst = parity::make_pair(shape, dtype, dst_layout, 22);
        parity::cuda_be().copy(src.cuda, dst.cuda);
        parity::cpu_be().copy(src.cpu, dst.cpu);
        check_whole(dst, describe("copy into " + std::string(parity::layout_name(dst_layout)),
                                  DType::float32, dtype, src_layout, shape));
      }
    }
    // Permutes of a 4-d tensor (the attention head split and merge), a middle-dim slice, and an
    // expanded last dim (stride 0 innermost, the tiled path with a column stride of 0).
    const Pair base = parity::make_pair({3, 9, 4, 35}, dtype, Layout::contiguous, 23);
    std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> views = {
        {"permute 0213",
         [](const Tensor& t) {
           return t.permute({0, 2, 1, 3});
         }},
        {"permute 3120",
         [](const Tensor& t) {
           return t.permute({3, 1, 2, 0});
         }},
        {"permute 0132",
         [](const Tensor& t) {
           return t.permute({0, 1, 3, 2});
         }},
        {"slice dim 1", [](const Tensor& t) { return t.slice(1, 2, 8, 3); }},
        {"expand last",
         [](const Tensor& t) {
           return raw::expand(t.slice(3, 0, 1), {3, 9, 4, 66}, "test");
         }},
    };
    for (const auto& [name, view] : views) {
      const Tensor cuda_src = view(base.cuda), cpu_src = view(base.cpu);
      for (DType to_dtype : {dtype, DType::float64}) {
        Pair dst = parity::make_output(cpu_src.shape(), to_dtype);
        parity::cuda_be().copy(cuda_src, dst.cuda);
        parity::cpu_be().copy(cpu_src, dst.cpu);
        parity::check_close(dst, name + " " + dtype_name(dtype) + " -> " + dtype_name(to_dtype),
                            0.0, 0.0);
      }
    }
    // Contiguous views at an odd offset: the conversion cannot use vector loads.
    const Pair flat = parity::make_pair({1001}, dtype, Layout::contiguous, 24);
    const Tensor cuda_src = raw::as_strided(flat.cuda, {999}, {1}, 1);
    const Tensor cpu_src = raw::as_strided(flat.cpu, {999}, {1}, 1);
    for (DType to_dtype : kAllDtypes) {
      Pair dst = parity::make_pair({1001}, to_dtype, Layout::contiguous, 25);
      const Tensor cuda_dst = raw::as_strided(dst.cuda, {999}, {1}, 2);
      const Tensor cpu_dst = raw::as_strided(dst.cpu, {999}, {1}, 2);
      parity::cuda_be().copy(cuda_src, cuda_dst);
      parity::cpu_be().copy(cpu_src, cpu_dst);
      check_whole(
          dst, std::string("unaligned copy ") + dtype_name(dtype) + " -> " + dtype_name(to_dtype));
    }
  }
  // A shape mismatch is an Error on the GPU as on the CPU.
  const Pair a = parity::make_output({2, 3}, DType::float32);
  const Pair b = parity::make_output({3, 2}, DType::float32);
  CHECK_THROWS_AS(parity::cuda_be().copy(a.cuda, b.cuda), Error);
}

TEST_CASE("arange: float32, float64, bfloat16 and int64, odd lengths and fractional steps") {
  if (!parity::gpu()) return;
  for (DType dtype : {DType::float32, DType::float64, DType::bfloat16, DType::int64}) {
    for (std::int64_t n : {1, 7, 1000, 100003}) {
      for (const auto& [start, step] : std::vector<std::pair<double, double>>{
               {0.0, 1.0}, {-3.5, 0.1}, {10.0, -0.7}, {1e6, 3.3}}) {
        Pair out = parity::make_output({n}, dtype);
        parity::cuda_be().arange(out.cuda, start, step);
        parity::cpu_be().arange(out.cpu, start, step);
        parity::check_close(out,
                            "arange " + std::string(dtype_name(dtype)) + " n=" + std::to_string(n) +
                                " start " + std::to_string(start) + " step " + std::to_string(step),
                            0.0, 0.0);
      }
    }
  }
  // Through the factory, on the GPU.
  CHECK(arange(0.0, 5.0, 1.0, {.dtype = DType::int64, .device = Device::cuda()})
            .to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 2, 3, 4});
  const Pair two_d = parity::make_output({2, 3}, DType::float32);
  CHECK_THROWS_AS(parity::cuda_be().arange(two_d.cuda, 0.0, 1.0), Error);
  const Pair bools = parity::make_output({3}, DType::boolean);
  CHECK_THROWS_AS(parity::cuda_be().arange(bools.cuda, 0.0, 1.0), Error);
}

TEST_CASE("random: the GPU draws the CPU's numbers, every kind, dtype, offset and layout") {
  if (!parity::gpu()) return;
  struct Kind {
    RandomKind kind;
    double a, b;
    std::vector<DType> dtypes;
  };
  const std::vector<Kind> kinds = {
      {RandomKind::normal, 0.5, 2.0, kFloating},
      {RandomKind::uniform, -2.0, 3.0, kFloating},
      {RandomKind::uniform, 0.0, 1.0, kFloating},
      {RandomKind::bernoulli, 0.3, 0.0, kAllDtypes},
  };
  for (const Kind& k : kinds) {
    for (DType dtype : k.dtypes) {
      for (std::uint64_t offset : {0ull, 1ull, 3ull, 5ull, 1000001ull}) {
        for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::sliced}) {
          for (const Shape& shape : {Shape{1, 1}, Shape{1, 7}, Shape{33, 65}}) {
            Pair out = parity::make_pair(shape, dtype, layout, 31);
            parity::cuda_be().random(out.cuda, k.kind, 1234, offset, k.a, k.b);
            parity::cpu_be().random(out.cpu, k.kind, 1234, offset, k.a, k.b);
            const std::string what = "random kind " + std::to_string(static_cast<int>(k.kind)) +
                                     " offset " + std::to_string(offset) + " " +
                                     parity::layout_name(layout) + " " + shape_str(shape);
            if (k.kind == RandomKind::normal) {
              // The GPU's double log1p and sincos may differ from glibc's in the last bits.
              const double rtol = dtype == DType::float64   ? 1e-13
                                  : dtype == DType::float32 ? 1e-6
                                                            : 8e-3;
              parity::check_close(whole(out.cuda), whole(out.cpu), what, rtol, 1e-6);
            } else {
              check_whole(out, what);  // uniform and bernoulli match bit for bit
            }
          }
        }
      }
    }
  }
}

TEST_CASE("random: drawing [0, n) at once equals [0, k) then [k, n); bad arguments") {
  if (!parity::gpu()) return;
  for (DType dtype : kFloating) {
    for (RandomKind kind : {RandomKind::normal, RandomKind::uniform}) {
      const Tensor all = empty({1001}, {.dtype = dtype, .device = Device::cuda()});
      parity::cuda_be().random(all, kind, 99, 17, 0.0, 1.0);
      const Tensor split = empty({1001}, {.dtype = dtype, .device = Device::cuda()});
      parity::cuda_be().random(split.slice(0, 0, 3), kind, 99, 17, 0.0, 1.0);
      parity::cuda_be().random(split.slice(0, 3, 1001), kind, 99, 20, 0.0, 1.0);
      parity::check_close(split, all, "split draw", 0.0, 0.0);
    }
  }
  const Tensor t = empty({4}, {.device = Device::cuda()});
  CHECK_THROWS_AS(parity::cuda_be().random(t, RandomKind::uniform, 1, 0, 1.0, 1.0), Error);
  CHECK_THROWS_AS(parity::cuda_be().random(t, RandomKind::normal, 1, 0, 0.0, -1.0), Error);
  CHECK_THROWS_AS(parity::cuda_be().random(t, RandomKind::bernoulli, 1, 0, 1.5, 0.0), Error);
  const Tensor ints = empty({4}, {.dtype = DType::int64, .device = Device::cuda()});
  CHECK_THROWS_AS(parity::cuda_be().random(ints, RandomKind::normal, 1, 0, 0.0, 1.0), Error);
  // randn on the GPU consumes the default generator exactly as on the CPU.
  manual_seed(7);
  const auto gpu_values = randn({3, 5}, {.device = Device::cuda()}).to_vector<float>();
  manual_seed(7);
  const auto cpu_values = randn({3, 5}).to_vector<float>();
  for (std::size_t i = 0; i < cpu_values.size(); ++i) {
    CHECK(gpu_values[i] == doctest::Approx(cpu_values[i]).epsilon(1e-6));
  }
}

TEST_CASE("device transfers: round trips of every dtype, views and non-contiguous tensors") {
  if (!parity::gpu()) return;
  for (DType dtype : kAllDtypes) {
    for (Layout layout :
         {Layout::contiguous, Layout::transposed, Layout::sliced, Layout::broadcast}) {
      const Pair p = parity::make_pair({6, 35}, dtype, layout, 41);
      const Tensor up = p.cpu.to(Device::cuda());
      CHECK(up.device() == Device::cuda());
      CHECK(up.dtype() == dtype);
      CHECK(up.shape() == p.cpu.shape());
      const Tensor down = up.to(Device::cpu());
      parity::check_close(
          down, p.cpu,
          std::string("round trip ") + dtype_name(dtype) + " " + parity::layout_name(layout), 0.0,
          0.0);
      // And from a GPU view back to the host.
      parity::check_close(p.cuda.to(Device::cpu()), p.cpu,
                          std::string("down from a view ") + parity::layout_name(layout), 0.0, 0.0);
    }
  }
  // Across devices into a strided destination, with a conversion on the way.
  const Pair src = parity::make_pair({9, 13}, DType::float64, Layout::contiguous, 42);
  Tensor gpu_dst = zeros({13, 9}, {.dtype = DType::bfloat16, .device = Device::cuda()});
  raw::copy(src.cpu, gpu_dst.transpose(0, 1));
  Tensor cpu_dst = zeros({13, 9}, {.dtype = DType::bfloat16});
  raw::copy(src.cpu, cpu_dst.transpose(0, 1));
  parity::check_close(gpu_dst, cpu_dst, "host -> strided GPU bfloat16", 0.0, 0.0);
  Tensor host_dst = zeros({13, 9}, {.dtype = DType::float32});
  raw::copy(src.cuda, host_dst.transpose(0, 1));
  parity::check_close(raw::to_device(host_dst, Device::cuda()),
                      raw::to_dtype(src.cpu.transpose(0, 1), DType::float32).contiguous(),
                      "GPU -> strided host float32", 0.0, 0.0);
  // Empty tensors, scalars, and reading single values.
  CHECK(zeros({0, 3}).to(Device::cuda()).to(Device::cpu()).shape() == Shape{0, 3});
  CHECK(full({}, 2.5, {.device = Device::cuda()}).item<float>() == 2.5f);
  CHECK(static_cast<float>(full({2}, 0.1, {.dtype = DType::bfloat16, .device = Device::cuda()})
                               .to_vector<bfloat16>()[1]) == static_cast<float>(bfloat16(0.1f)));
  const Tensor same = ones({2}, {.device = Device::cuda()});
  CHECK(same.to(Device::cuda()).is_same(same));
}

TEST_CASE("device allocator: statistics, reuse, reset_peak, empty_cache, out of memory") {
  if (!parity::gpu()) return;
  const Device gpu = Device::cuda();
  synchronize(gpu);
  empty_cache(gpu);
  reset_peak_memory(gpu);
  const MemoryStats s0 = memory_stats(gpu);
  CHECK(s0.cached_bytes == 0);
  CHECK(s0.peak_bytes == s0.current_bytes);
  void* first = nullptr;
  {
    const Tensor t = empty({1000}, {.device = gpu});  // 4000 bytes, a 4096-byte block
    first = t.data_ptr();
    const MemoryStats s1 = memory_stats(gpu);
    CHECK(s1.current_bytes == s0.current_bytes + 4000);
    CHECK(s1.peak_bytes == s0.current_bytes + 4000);
    CHECK(s1.allocation_count == s0.allocation_count + 1);
  }
  const MemoryStats s2 = memory_stats(gpu);
  CHECK(s2.current_bytes == s0.current_bytes);
  CHECK(s2.peak_bytes == s0.current_bytes + 4000);
  CHECK(s2.cached_bytes == 4096);
  {
    // The same size class comes back from the cache: the same block, nothing new cached.
    const Tensor t = empty({1020}, {.device = gpu});
    CHECK(t.data_ptr() == first);
    CHECK(memory_stats(gpu).cached_bytes == 0);
    CHECK(memory_stats(gpu).allocation_count == s0.allocation_count + 2);
    // A large block: 3 MiB rounds to a 4 MiB class.
    const Tensor big = empty({3 << 18}, {.device = gpu});
    CHECK(memory_stats(gpu).current_bytes == s0.current_bytes + 4080 + (3 << 20));
  }
  CHECK(memory_stats(gpu).cached_bytes == 4096 + (4 << 20));
  reset_peak_memory(gpu);
  CHECK(memory_stats(gpu).peak_bytes == memory_stats(gpu).current_bytes);
  empty_cache(gpu);
  CHECK(memory_stats(gpu).cached_bytes == 0);
  CHECK(memory_stats(gpu).current_bytes == s0.current_bytes);

  // 2^48 float32 elements: a PiB, more than any GPU holds.
  const std::string message =
      parity::error_of([&] { empty({std::int64_t{1} << 48}, {.device = gpu}); });
  INFO(message);
  CHECK(contains(message, "out of memory"));
  CHECK(contains(message, std::to_string(std::int64_t{1} << 50) + " bytes"));
  CHECK(contains(message, "free of"));
  CHECK(memory_stats(gpu).current_bytes == s0.current_bytes);
  // The allocator still works afterwards.
  CHECK(ones({3}, {.device = gpu}).to_vector<float>() == std::vector<float>{1, 1, 1});
}

TEST_CASE("without a usable GPU, moving a tensor to the GPU is an Error saying so") {
  if (cuda_available()) return;  // this one runs where the CUDA cases skip
  const std::string message = parity::error_of([] { ones({2}).to(Device::cuda()); });
  INFO(message);
  // A build with the CUDA backend says there is no usable GPU; a build without it says so.
  CHECK((contains(message, "no usable GPU") || contains(message, "no CUDA backend")));
  CHECK(contains(message, "cuda"));
  CHECK_THROWS_AS(empty({2}, {.device = Device::cuda()}), Error);
  CHECK_THROWS_AS(memory_stats(Device::cuda()), Error);
  CHECK_THROWS_AS(from<float>({1.0f}, {1}, Device::cuda()), Error);
}
