// CUDA tensors across the job's processes: all-reduce and broadcast through the CUDA backend's
// NCCL communicator, and DistributedDataParallel on the GPU. Both ranks may share one GPU (the
// suite's main gives each rank its own NCCL host id, so NCCL accepts two ranks on one device
// and connects them over its socket transport). Skipped, with a message, without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "autograd/ops.h"
#include "core/backend.h"
#include "nn/distributed/data_parallel.h"
#include "nn/distributed/distributed.h"
#include "nn/linear.h"
#include "nn/optim.h"

namespace tf = tinyformer;
namespace dist = tinyformer::distributed;
namespace nn = tinyformer::nn;
using tf::Tensor;

namespace {

double value(int r, std::int64_t i) {
  return static_cast<double>((r + 1) * (i % 13) - i % 5);
}

Tensor rank_values(std::int64_t n, tf::DType dtype, int r, tf::Device device) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = value(r, i);
  return tf::raw::to_dtype(tf::from<double>(v, {n}), dtype).to(device);
}

std::vector<double> host_values(const Tensor& t) {
  return tf::raw::to_dtype(t.contiguous().to(tf::Device::cpu()), tf::DType::float64)
      .to_vector<double>();
}

bool skip_without_gpu() {
  // Every rank sees the same answer on one machine; a job across machines needs GPUs on all.
  const bool gpu = dist::all_reduce_min(tf::cuda_available() ? 1 : 0) == 1;
  if (!gpu) MESSAGE("skipped: no GPU on every rank (or a build without CUDA); NCCL not exercised");
  return !gpu;
}

}  // namespace

TEST_CASE("NCCL: all_reduce and broadcast of CUDA tensors, every dtype, odd sizes") {
  if (skip_without_gpu()) return;
  const tf::Device gpu = tf::Device::cuda(0);
  for (tf::DType dtype :
       {tf::DType::float32, tf::DType::float64, tf::DType::bfloat16, tf::DType::int64}) {
    for (std::int64_t n : {1, 7, 1031}) {
      CAPTURE(dtype);
      CAPTURE(n);
      Tensor t = rank_values(n, dtype, dist::rank(), gpu);
      dist::Work work = dist::all_reduce_async(t);
      work.wait();
      CHECK(t.device() == gpu);
      const std::vector<double> got = host_values(t);
      for (std::int64_t i = 0; i < n; ++i) {
        REQUIRE(got[static_cast<std::size_t>(i)] == value(0, i) + value(1, i));
      }
      Tensor b = rank_values(n, dtype, dist::rank(), gpu);
      dist::broadcast(b, 1);
      CHECK(host_values(b) == host_values(rank_values(n, dtype, 1, gpu)));
    }
  }
  // Mean, and a transposed view reduced through a contiguous copy.
  Tensor base = rank_values(15, tf::DType::float32, dist::rank(), gpu).view({3, 5});
  dist::all_reduce(base.transpose(0, 1), dist::Reduction::mean);
  const std::vector<double> got = host_values(base.view({15}));
  for (std::int64_t i = 0; i < 15; ++i) {
    CHECK(got[static_cast<std::size_t>(i)] == (value(0, i) + value(1, i)) / 2);
  }
  // bool: logical or.
  Tensor flags = tf::raw::to_dtype(
                     tf::from<double>(
                         {dist::rank() == 0 ? 1.0 : 0.0, 0.0, dist::rank() == 1 ? 1.0 : 0.0}, {3}),
                     tf::DType::boolean)
                     .to(gpu);
  dist::all_reduce(flags);
  CHECK(host_values(flags) == std::vector<double>{1.0, 0.0, 1.0});
}

TEST_CASE("NCCL: DistributedDataParallel on the GPU equals one process on the whole batch") {
  if (skip_without_gpu()) return;
  const tf::Device gpu = tf::Device::cuda(0);
  tf::manual_seed(3 + static_cast<std::uint64_t>(dist::rank()));
  auto model = std::make_shared<nn::Linear>(5, 3);
  model->to(tf::DType::float64);
  model->to(gpu);
  dist::DistributedDataParallel ddp(model, {.bucket_cap_mb = 1e-6});
  auto reference = std::make_shared<nn::Linear>(5, 3);
  reference->to(tf::DType::float64);
  reference->to(gpu);
  reference->load_state_dict(model->state_dict());
  nn::optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  nn::optim::SGD ref_opt(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < 3; ++step) {
    tf::manual_seed(50 + static_cast<std::uint64_t>(step));
    Tensor x = tf::randn({8, 5}, {.dtype = tf::DType::float64}).to(gpu);
    Tensor y = tf::randn({8, 3}, {.dtype = tf::DType::float64}).to(gpu);
    ref_opt.zero_grad();
    Tensor d = reference->forward(x) - y;
    (d * d).mean().backward();
    ref_opt.step();
    opt.zero_grad();
    Tensor dl = model->forward(x.narrow(0, 4 * dist::rank(), 4)) - y.narrow(0, 4 * dist::rank(), 4);
    (dl * dl).mean().backward();
    opt.step();
  }
  const std::vector<double> a = host_values(model->weight);
  const std::vector<double> b = host_values(reference->weight);
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(std::abs(a[i] - b[i]) < 1e-12);
}
