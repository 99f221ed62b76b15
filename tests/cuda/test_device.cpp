// What only a device has: transfers between the host and the GPU, the caching device
// allocator's statistics and out-of-memory error, and the error a machine without a GPU gives.
// (fill, copy, arange and random are parity cases in tests/parity/test_memory.cpp.)
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "parity/parity.h"

namespace {

using namespace tinyformer;
using parity::Layout;
using parity::Pair;

const std::vector<DType> kAllDtypes = {DType::float32, DType::float64, DType::bfloat16,
                                       DType::int64, DType::boolean};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("device transfers: round trips of every dtype, views and non-contiguous tensors") {
  if (!parity::available()) return;
  for (DType dtype : kAllDtypes) {
    for (Layout layout :
         {Layout::contiguous, Layout::transposed, Layout::sliced, Layout::broadcast}) {
      const Pair p = parity::make_pair({6, 35}, dtype, layout, 41);
      const Tensor up = p.ref.to(Device::cuda());
      CHECK(up.device() == Device::cuda());
      CHECK(up.dtype() == dtype);
      CHECK(up.shape() == p.ref.shape());
      const Tensor down = up.to(Device::cpu());
      parity::check_close(
          down, p.ref,
          std::string("round trip ") + dtype_name(dtype) + " " + parity::layout_name(layout), 0.0,
          0.0);
      // And from a GPU view back to the host.
      parity::check_close(p.dev.to(Device::cpu()), p.ref,
                          std::string("down from a view ") + parity::layout_name(layout), 0.0, 0.0);
    }
  }
  // Across devices into a strided destination, with a conversion on the way.
  const Pair src = parity::make_pair({9, 13}, DType::float64, Layout::contiguous, 42);
  Tensor gpu_dst = zeros({13, 9}, {.dtype = DType::bfloat16, .device = Device::cuda()});
  raw::copy(src.ref, gpu_dst.transpose(0, 1));
  Tensor cpu_dst = zeros({13, 9}, {.dtype = DType::bfloat16});
  raw::copy(src.ref, cpu_dst.transpose(0, 1));
  parity::check_close(gpu_dst, cpu_dst, "host -> strided GPU bfloat16", 0.0, 0.0);
  Tensor host_dst = zeros({13, 9}, {.dtype = DType::float32});
  raw::copy(src.dev, host_dst.transpose(0, 1));
  parity::check_close(parity::to_dev(host_dst),
                      raw::to_dtype(src.ref.transpose(0, 1), DType::float32).contiguous(),
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
  if (!parity::available()) return;
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

  // 2^37 float32 elements: 512 GiB, more than any GPU holds but below the cap of one tensor
  // (kMaxStorageBytes, 1 TiB), so the request reaches cudaMalloc.
  const std::string message =
      parity::error_of([&] { empty({std::int64_t{1} << 37}, {.device = gpu}); });
  INFO(message);
  CHECK(contains(message, "empty: out of memory: shape [137438953472] float32 asked for " +
                              std::to_string(std::int64_t{1} << 39) + " bytes"));
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
