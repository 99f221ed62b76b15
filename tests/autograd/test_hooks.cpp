// The backward pass's hooks: a leaf's post-accumulate hook runs once per pass with the final
// gradient, before nodes that run later in the pass; queued callbacks run at the pass's end.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "autograd/hooks.h"
#include "autograd/ops.h"
#include "core/error.h"

namespace tf = tinyformer;
using tf::Tensor;

namespace {
Tensor leaf(std::initializer_list<double> v, const tf::Shape& shape) {
  Tensor t = tf::from<double>(v, shape);
  t.requires_grad_(true);
  return t;
}
}  // namespace

TEST_CASE("post-accumulate hook: runs once per pass, after every consumer has delivered") {
  Tensor a = leaf({1.0, 2.0}, {2});
  std::vector<std::vector<double>> seen;
  auto handle = tf::autograd::register_post_accumulate_grad_hook(
      a, [&](const Tensor& t) { seen.push_back(t.grad().to_vector<double>()); });
  // a is read by three ops; the hook sees the sum of all three contributions, once.
  Tensor y = (a * 2.0).sum() + (a * a).sum() + a.sum();
  y.backward();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == std::vector<double>{5.0, 7.0});  // 2 + 2a + 1
  // A second pass accumulates; the hook sees the running total.
  (a * 3.0).sum().backward();
  REQUIRE(seen.size() == 2);
  CHECK(seen[1] == std::vector<double>{8.0, 10.0});
  // Removed: no more calls.
  handle.remove();
  a.sum().backward();
  CHECK(seen.size() == 2);
}

TEST_CASE("post-accumulate hook: a leaf's hook runs before the nodes nearer the inputs") {
  // x -> (* w2) -> (* w1) -> sum: backward reaches w1 first, then w2. When w1's hook runs, w2's
  // gradient does not exist yet: the hook fires in the middle of the pass, not at its end.
  Tensor w1 = leaf({2.0}, {1});
  Tensor w2 = leaf({3.0}, {1});
  Tensor x = tf::from<double>({1.0, 1.0}, {2});
  std::vector<std::string> order;
  bool w2_had_grad_when_w1_ready = true;
  auto h1 = tf::autograd::register_post_accumulate_grad_hook(w1, [&](const Tensor&) {
    order.push_back("w1");
    w2_had_grad_when_w1_ready = w2.grad().defined();
  });
  auto h2 = tf::autograd::register_post_accumulate_grad_hook(
      w2, [&](const Tensor&) { order.push_back("w2"); });
  Tensor h = tf::exp(x * w2);  // more work between w1's and w2's gradients
  (h * w1).sum().backward();
  CHECK(order == std::vector<std::string>{"w1", "w2"});
  CHECK_FALSE(w2_had_grad_when_w1_ready);
}

TEST_CASE("post-accumulate hook: registered before the graph exists, not run for unused leaves") {
  Tensor a = leaf({1.0}, {1});
  Tensor unused = leaf({1.0}, {1});
  int a_calls = 0;
  int unused_calls = 0;
  auto ha = tf::autograd::register_post_accumulate_grad_hook(a, [&](const Tensor&) { ++a_calls; });
  auto hu = tf::autograd::register_post_accumulate_grad_hook(
      unused, [&](const Tensor&) { ++unused_calls; });
  (a * 2.0).sum().backward();
  CHECK(a_calls == 1);
  CHECK(unused_calls == 0);
  // The handle destroyed removes the hook.
  { auto moved = std::move(ha); }
  (a * 2.0).sum().backward();
  CHECK(a_calls == 1);
}

TEST_CASE("post-accumulate hook: refuses tensors that are not leaves requiring grad") {
  Tensor a = leaf({1.0}, {1});
  Tensor b = a * 2.0;
  Tensor c = tf::from<double>({1.0}, {1});
  auto noop = [](const Tensor&) {};
  CHECK_THROWS_WITH_AS(static_cast<void>(tf::autograd::register_post_accumulate_grad_hook(b, noop)),
                       doctest::Contains("expected a leaf tensor that requires grad, got a "
                                         "non-leaf tensor"),
                       tf::Error);
  CHECK_THROWS_WITH_AS(static_cast<void>(tf::autograd::register_post_accumulate_grad_hook(c, noop)),
                       doctest::Contains("does not require grad"), tf::Error);
}

TEST_CASE("queue_callback: runs at the end of the pass, after every hook, in order") {
  Tensor w1 = leaf({2.0}, {1});
  Tensor w2 = leaf({3.0}, {1});
  std::vector<std::string> events;
  auto h1 = tf::autograd::register_post_accumulate_grad_hook(w1, [&](const Tensor&) {
    events.push_back("w1");
    CHECK(tf::autograd::in_backward());
    tf::autograd::queue_callback([&] {
      events.push_back("end");
      // All gradients are final here; a callback may queue another.
      CHECK(w2.grad().defined());
      tf::autograd::queue_callback([&] { events.push_back("end2"); });
    });
  });
  auto h2 = tf::autograd::register_post_accumulate_grad_hook(
      w2, [&](const Tensor&) { events.push_back("w2"); });
  (w1 * w2).sum().backward();
  // w1 and w2 are inputs of the same node, so their order is the engine's; the callbacks come
  // after both.
  REQUIRE(events.size() == 4);
  CHECK(std::is_permutation(events.begin(), events.begin() + 2,
                            std::vector<std::string>{"w1", "w2"}.begin()));
  CHECK(events[2] == "end");
  CHECK(events[3] == "end2");
  CHECK_FALSE(tf::autograd::in_backward());
  CHECK_THROWS_WITH_AS(tf::autograd::queue_callback([] {}),
                       doctest::Contains("no backward pass is running"), tf::Error);
}

TEST_CASE("queue_callback: a pass that throws drops its callbacks") {
  Tensor a = leaf({1.0}, {1});
  int ran = 0;
  auto h = tf::autograd::register_post_accumulate_grad_hook(a, [&](const Tensor&) {
    tf::autograd::queue_callback([&] { ++ran; });
    throw tf::Error("hook failed");
  });
  CHECK_THROWS_WITH_AS((a * 2.0).sum().backward(), "hook failed", tf::Error);
  CHECK(ran == 0);
  CHECK_FALSE(tf::autograd::in_backward());
}
