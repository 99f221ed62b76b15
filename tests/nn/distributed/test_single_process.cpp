// The distributed layer in a process that did not join a job (no mpirun, or a build without
// MPI): a world of one, and collectives and the data-parallel wrapper refuse to run. The
// multi-process cases are tests/distributed/, run under mpirun.
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include <tinyformer/tinyformer.h>

namespace tf = tinyformer;
namespace dist = tinyformer::distributed;

TEST_CASE("distributed: before init, a world of one whose collectives refuse to run") {
  REQUIRE_FALSE(dist::is_initialized());
  CHECK(dist::rank() == 0);
  CHECK(dist::world_size() == 1);
  CHECK(dist::local_rank() == 0);
  CHECK(dist::local_world_size() == 1);
  const std::string reason =
      dist::available() ? "distributed::init() has not been called" : "this build has no MPI";
  tf::Tensor t = tf::ones({3});
  CHECK_THROWS_WITH_AS(dist::all_reduce(t), doctest::Contains(reason.c_str()), tf::Error);
  CHECK_THROWS_WITH_AS(dist::broadcast(t), doctest::Contains(reason.c_str()), tf::Error);
  CHECK_THROWS_WITH_AS(dist::barrier(), doctest::Contains(reason.c_str()), tf::Error);
  CHECK(t.to_vector<float>() == std::vector<float>{1, 1, 1});
  // A complete Work waits for nothing.
  dist::Work done;
  CHECK(done.test());
  done.wait();
}

TEST_CASE("DistributedDataParallel: refuses to wrap a model outside a job") {
  auto model = std::make_shared<tf::nn::Linear>(2, 2);
  CHECK_THROWS_WITH_AS(dist::DistributedDataParallel{model},
                       "DistributedDataParallel: expected a running distributed job, but "
                       "distributed::init() has not been called",
                       tf::Error);
  CHECK_THROWS_WITH_AS(dist::DistributedDataParallel{nullptr},
                       "DistributedDataParallel: expected a module, got a null pointer", tf::Error);
}
