// Optimizers against torch.optim (tests/fixtures/make_optim_fixtures.py), parameter groups,
// state dicts and resuming, gradient clipping and accumulation, and learning-rate schedules.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numbers>
#include <sstream>
#include <string>
#include <vector>

#include <tinyformer/tinyformer.h>

using namespace tinyformer;
namespace optim = tinyformer::nn::optim;
using json = nlohmann::json;

namespace {

constexpr double kTol = 1e-10;

const json& reference() {
  static const json j = [] {
    const std::string path = std::string(TINYFORMER_FIXTURES) + "/optim_reference.json";
    std::ifstream in(path);
    REQUIRE_MESSAGE(in.good(), "cannot open ", path);
    return json::parse(in);
  }();
  return j;
}

Tensor tensor_from(const json& j) {
  return from(j.at("data").get<std::vector<double>>(), j.at("shape").get<Shape>());
}

void check_close(const Tensor& got, const json& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.shape() == want.at("shape").get<Shape>());
  const std::vector<double> g = got.to_vector<double>();
  const std::vector<double> w = want.at("data").get<std::vector<double>>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (!(std::abs(g[i] - w[i]) <= kTol)) {
      std::ostringstream msg;
      msg.precision(17);
      msg << "element " << i << ": got " << g[i] << ", PyTorch gives " << w[i];
      FAIL_CHECK(msg.str());
      return;
    }
  }
}

// The fixture's least-squares model: loss = sum((x @ W^T + b - y)^2).
struct Regression : nn::Module {
  Tensor W, b;
  Regression(const Tensor& w0, const Tensor& b0) {
    W = register_parameter("W", w0.clone());
    b = register_parameter("b", b0.clone());
  }
  Tensor loss(const Tensor& x, const Tensor& y) const {
    return sum(pow(matmul(x, W.transpose(0, 1)) + b - y, 2.0));
  }
};

std::shared_ptr<Regression> fixture_model() {
  const json& ref = reference();
  return std::make_shared<Regression>(tensor_from(ref["W"]), tensor_from(ref["b"]));
}

// The optimizer a fixture case describes, over the model's W and b.
std::unique_ptr<optim::Optimizer> make_optimizer(const json& c, Regression& m) {
  std::vector<optim::ParamGroup> groups;
  for (const json& g : c["groups"]) {
    optim::ParamGroup group;
    for (const auto& name : g["params"]) group.params.push_back(name == "W" ? m.W : m.b);
    if (!g["weight_decay"].is_null()) group.weight_decay = g["weight_decay"].get<double>();
    groups.push_back(group);
  }
  const json& o = c["options"];
  const std::string type = c["optimizer"];
  if (type == "SGD") {
    return std::make_unique<optim::SGD>(groups, optim::SGDOptions{
                                                    .lr = o["lr"],
                                                    .momentum = o["momentum"],
                                                    .dampening = o["dampening"],
                                                    .weight_decay = o["weight_decay"],
                                                    .nesterov = o["nesterov"],
                                                });
  }
  const std::pair<double, double> betas{o["betas"][0], o["betas"][1]};
  if (type == "Adam") {
    return std::make_unique<optim::Adam>(
        groups,
        optim::AdamOptions{
            .lr = o["lr"], .betas = betas, .eps = o["eps"], .weight_decay = o["weight_decay"]});
  }
  REQUIRE(type == "AdamW");
  return std::make_unique<optim::AdamW>(
      groups,
      optim::AdamWOptions{
          .lr = o["lr"], .betas = betas, .eps = o["eps"], .weight_decay = o["weight_decay"]});
}

void train_step(optim::Optimizer& opt, const Regression& m, const Tensor& x, const Tensor& y) {
  opt.zero_grad();
  m.loss(x, y).backward();
  opt.step();
}

}  // namespace

TEST_CASE("SGD, Adam and AdamW match torch.optim step by step") {
  const json& ref = reference();
  const Tensor x = tensor_from(ref["x"]);
  const Tensor y = tensor_from(ref["y"]);
  REQUIRE(ref["cases"].size() == 5);
  for (const json& c : ref["cases"]) {
    const std::string label = c["optimizer"].get<std::string>() + " " + c["options"].dump();
    INFO(label);
    auto m = fixture_model();
    auto opt = make_optimizer(c, *m);
    CHECK(opt->type_name() == c["optimizer"].get<std::string>());
    int step = 0;
    for (const json& want : c["steps"]) {
      opt->zero_grad();
      const Tensor loss = m->loss(x, y);
      CHECK(std::abs(loss.item<double>() - want["loss_before"].get<double>()) <= 1e-9);
      loss.backward();
      opt->step();
      ++step;
      check_close(m->W, want["W"], label + " W after step " + std::to_string(step));
      check_close(m->b, want["b"], label + " b after step " + std::to_string(step));
    }
    CHECK(step == 5);
  }
}

TEST_CASE("clip_grad_norm matches torch.nn.utils.clip_grad_norm_") {
  const json& ref = reference();
  const Tensor x = tensor_from(ref["x"]);
  const Tensor y = tensor_from(ref["y"]);
  for (const json& c : ref["clip"]) {
    auto m = fixture_model();
    m->loss(x, y).backward();
    const double norm = optim::clip_grad_norm(m->parameters(), c["max_norm"].get<double>());
    CHECK(std::abs(norm - c["total_norm"].get<double>()) <= kTol);
    check_close(m->W.grad(), c["W_grad"], "W grad");
    check_close(m->b.grad(), c["b_grad"], "b grad");
  }
}

TEST_CASE("clip_grad_norm: the norm of all gradients as one vector, skipping missing ones") {
  Tensor a = zeros({2}, {.dtype = kFloat64, .requires_grad = true});
  Tensor b = zeros({1}, {.dtype = kFloat64, .requires_grad = true});
  Tensor c = zeros({3}, {.dtype = kFloat64, .requires_grad = true});  // no gradient
  a.set_grad(from<double>({3.0, 0.0}, {2}));
  b.set_grad(from<double>({4.0}, {1}));
  // |(3, 0, 4)| = 5; max_norm 10 leaves the gradients alone.
  CHECK(optim::clip_grad_norm({a, b, c}, 10.0) == doctest::Approx(5.0).epsilon(1e-15));
  CHECK(a.grad().to_vector<double>() == std::vector<double>{3.0, 0.0});
  // max_norm 1 scales by 1 / (5 + 1e-6).
  CHECK(optim::clip_grad_norm({a, b, c}, 1.0) == doctest::Approx(5.0).epsilon(1e-15));
  CHECK(a.grad().to_vector<double>()[0] == doctest::Approx(3.0 / (5.0 + 1e-6)).epsilon(1e-15));
  CHECK(b.grad().to_vector<double>()[0] == doctest::Approx(4.0 / (5.0 + 1e-6)).epsilon(1e-15));
  CHECK(!c.grad().defined());
  CHECK(optim::clip_grad_norm({c}, 1.0) == 0.0);
  // float32 gradients are clipped in their dtype.
  Tensor f = zeros({2}, {.requires_grad = true});
  f.set_grad(from<float>({30.0f, 40.0f}, {2}));
  CHECK(optim::clip_grad_norm({f}, 5.0) == doctest::Approx(50.0));
  CHECK(f.grad().dtype() == kFloat32);
  CHECK(f.grad().to_vector<float>()[1] == doctest::Approx(4.0).epsilon(1e-6));
  // A non-finite norm is reported and nothing is scaled.
  b.set_grad(from<double>({INFINITY}, {1}));
  CHECK(std::isinf(optim::clip_grad_norm({a, b}, 1.0)));
  CHECK(a.grad().to_vector<double>()[0] == doctest::Approx(3.0 / (5.0 + 1e-6)).epsilon(1e-15));
  CHECK_THROWS_AS(optim::clip_grad_norm({a}, 0.0), Error);
  CHECK_THROWS_AS(optim::clip_grad_norm({a}, -1.0), Error);
  CHECK_THROWS_AS(optim::clip_grad_norm({Tensor()}, 1.0), Error);
}

TEST_CASE("clip_grad_norm: squares summed in float64 for float32, bfloat16 and strided gradients") {
  // A float32 gradient of 100003 elements (several blocks of the kernel), a bfloat16 one and a
  // transposed float64 one: the norm is the float64 sum of the exact squares, to rounding.
  Tensor a = zeros({100003}, {.requires_grad = true});
  Tensor b = zeros({5}, {.dtype = kBFloat16, .requires_grad = true});
  Tensor c = zeros({3, 2}, {.dtype = kFloat64, .requires_grad = true});
  manual_seed(7);
  const std::vector<float> ga = randn({100003}).to_vector<float>();
  a.set_grad(from<float>(ga, {100003}));
  b.set_grad(from<float>({1.5f, -2.0f, 0.25f, 3.0f, -0.5f}, {5}).to(kBFloat16));
  c.set_grad(from<double>({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {2, 3}).transpose(0, 1));
  REQUIRE_FALSE(c.grad().is_contiguous());
  double expected = 0.0;
  for (const float v : ga) expected += static_cast<double>(v) * v;
  expected += 1.5 * 1.5 + 2.0 * 2.0 + 0.25 * 0.25 + 3.0 * 3.0 + 0.5 * 0.5;
  expected += 1.0 + 4.0 + 9.0 + 16.0 + 25.0 + 36.0;
  expected = std::sqrt(expected);
  const double norm = optim::clip_grad_norm({a, b, c}, 1.0);
  CHECK(norm == doctest::Approx(expected).epsilon(1e-13));
  // Every gradient scaled by the same factor, in its own dtype and layout.
  const double scale = 1.0 / (expected + 1e-6);
  CHECK(a.grad().dtype() == kFloat32);
  CHECK(a.grad().to_vector<float>()[12345] == doctest::Approx(ga[12345] * scale).epsilon(1e-6));
  CHECK(b.grad().dtype() == kBFloat16);
  CHECK(b.grad().to(kFloat32).to_vector<float>()[3] == doctest::Approx(3.0 * scale).epsilon(1e-2));
  const std::vector<double> cg = c.grad().to_vector<double>();  // row-major of the view
  const double c_values[] = {1.0, 4.0, 2.0, 5.0, 3.0, 6.0};
  for (int i = 0; i < 6; ++i) CHECK(cg[i] == doctest::Approx(c_values[i] * scale).epsilon(1e-13));
  // Clipped again, the norm is max_norm (to the 1e-6 in the divisor and bfloat16's rounding).
  CHECK(optim::clip_grad_norm({a, b, c}, 1.0) == doctest::Approx(1.0).epsilon(1e-4));
}

TEST_CASE("gradient accumulation: two half batches with loss / 2 give the full-batch gradient") {
  const json& ref = reference();
  const Tensor x = tensor_from(ref["x"]);  // [5, 4]
  const Tensor y = tensor_from(ref["y"]);  // [5, 3]
  // Use 4 of the 5 rows so the halves are equal; the mean loss over 4 rows is the average of
  // the two half-batch means.
  const Tensor x4 = x.narrow(0, 0, 4), y4 = y.narrow(0, 0, 4);
  auto mean_loss = [](const Regression& m, const Tensor& xs, const Tensor& ys) {
    return mean(pow(matmul(xs, m.W.transpose(0, 1)) + m.b - ys, 2.0));
  };
  auto full = fixture_model();
  mean_loss(*full, x4, y4).backward();

  auto accumulated = fixture_model();
  for (int half = 0; half < 2; ++half) {
    (mean_loss(*accumulated, x4.narrow(0, 2 * half, 2), y4.narrow(0, 2 * half, 2)) / 2.0)
        .backward();
  }
  const std::vector<std::pair<Tensor, Tensor>> pairs = {{full->W, accumulated->W},
                                                        {full->b, accumulated->b}};
  for (const auto& [want, got] : pairs) {
    const auto w = want.grad().to_vector<double>();
    const auto g = got.grad().to_vector<double>();
    REQUIRE(w.size() == g.size());
    for (std::size_t i = 0; i < w.size(); ++i) CHECK(g[i] == doctest::Approx(w[i]).epsilon(1e-13));
  }
  // And one optimizer step from either gradient lands on the same parameters.
  optim::AdamW a(full->parameters(), {.lr = 0.1});
  optim::AdamW b(accumulated->parameters(), {.lr = 0.1});
  a.step();
  b.step();
  const auto wa = full->W.to_vector<double>(), wb = accumulated->W.to_vector<double>();
  for (std::size_t i = 0; i < wa.size(); ++i) CHECK(wb[i] == doctest::Approx(wa[i]).epsilon(1e-13));
}

TEST_CASE("decay_groups puts dim < 2 parameters in a group without weight decay") {
  nn::Sequential seq;
  auto fc = seq.push_back(std::make_shared<nn::Linear>(4, 3));
  auto ln = seq.push_back(std::make_shared<nn::LayerNorm>(3));
  const auto groups = optim::decay_groups(seq, 0.1);
  REQUIRE(groups.size() == 2);
  REQUIRE(groups[0].params.size() == 1);
  CHECK(groups[0].params[0].is_same(fc->weight));
  CHECK(groups[0].weight_decay == 0.1);
  REQUIRE(groups[1].params.size() == 3);
  CHECK(groups[1].params[0].is_same(fc->bias));
  CHECK(groups[1].params[1].is_same(ln->weight));
  CHECK(groups[1].params[2].is_same(ln->bias));
  CHECK(groups[1].weight_decay == 0.0);
  CHECK(!groups[0].lr.has_value());

  optim::AdamW opt(groups, {.lr = 3e-4, .weight_decay = 0.5});
  CHECK(opt.num_groups() == 2);
  CHECK(opt.weight_decay(0) == 0.1);  // the group's own value wins
  CHECK(opt.weight_decay(1) == 0.0);
  CHECK(opt.lr(0) == 3e-4);  // unset in the group: the optimizer's
  CHECK(opt.parameters().size() == 4);
  CHECK_THROWS_AS(optim::decay_groups(seq, -1.0), Error);
}

TEST_CASE("learning rate per group: get, set all, set one") {
  auto m = fixture_model();
  optim::SGD opt(std::vector<optim::ParamGroup>{{.params = {m->W}, .lr = 0.5, .weight_decay = {}},
                                                {.params = {m->b}, .lr = {}, .weight_decay = {}}},
                 {.lr = 0.1});
  CHECK(opt.lr(0) == 0.5);
  CHECK(opt.lr(1) == 0.1);
  opt.set_lr(1, 0.2);
  CHECK(opt.lr(1) == 0.2);
  opt.set_lr(0.3);
  CHECK(opt.lr(0) == 0.3);
  CHECK(opt.lr(1) == 0.3);
  CHECK_THROWS_AS(opt.set_lr(-0.1), Error);
  CHECK_THROWS_AS(opt.set_lr(2, 0.1), Error);
  CHECK_THROWS_AS(opt.lr(2), Error);
  CHECK_THROWS_AS(opt.set_lr(std::nan("")), Error);
  // A group with lr 0 does not move; the other does, by exactly lr * grad.
  opt.set_lr(0, 0.0);
  m->W.set_grad(ones_like(m->W));
  m->b.set_grad(ones_like(m->b));
  const auto w0 = m->W.to_vector<double>();
  const auto b0 = m->b.to_vector<double>();
  opt.step();
  CHECK(m->W.to_vector<double>() == w0);
  CHECK(m->b.to_vector<double>()[0] == b0[0] - 0.3);
}

TEST_CASE("lr_scale keeps a group at its fraction of every learning rate set for all groups") {
  auto m = fixture_model();
  optim::AdamW opt(
      std::vector<optim::ParamGroup>{
          {.params = {m->W}, .lr = {}, .weight_decay = {}},
          {.params = {m->b}, .lr = {}, .weight_decay = 0.0, .lr_scale = 0.1}},
      {.lr = 1e-2});
  CHECK(opt.lr(0) == 1e-2);
  CHECK(opt.lr(1) == doctest::Approx(1e-3).epsilon(1e-15));
  // What a schedule does every step: one rate for all groups. The scaled group stays at a tenth
  // (the trap this guards against: a plain set_lr(lr) would overwrite the smaller rate).
  for (const double lr : {3e-3, 5e-4, 0.0}) {
    opt.set_lr(lr);
    CHECK(opt.lr(0) == lr);
    CHECK(opt.lr(1) == doctest::Approx(lr * 0.1).epsilon(1e-15));
  }
  // set_lr(group, lr) sets that group's rate as given.
  opt.set_lr(1, 0.25);
  CHECK(opt.lr(1) == 0.25);
  // The step uses the scaled rate: the first AdamW step moves each element by lr (its
  // m / sqrt(v) is 1 for a constant gradient, up to eps), and the scaled group by a tenth of it.
  opt.set_lr(2e-2);
  m->W.set_grad(ones_like(m->W));
  m->b.set_grad(ones_like(m->b));
  const auto w0 = m->W.to_vector<double>();
  const auto b0 = m->b.to_vector<double>();
  opt.step();
  const auto w1 = m->W.to_vector<double>();
  const auto b1 = m->b.to_vector<double>();
  // W also decays (AdamW's default weight decay, 1e-2): w0 (1 - lr wd) - lr.
  CHECK(w1[0] == doctest::Approx(w0[0] * (1 - 2e-2 * 1e-2) - 2e-2).epsilon(1e-6));
  CHECK(b1[0] == doctest::Approx(b0[0] - 2e-3).epsilon(1e-6));
  // A scale that is not a positive finite number is an error.
  for (const double bad : {0.0, -1.0, std::nan("")}) {
    CHECK_THROWS_AS(optim::SGD(
                        std::vector<optim::ParamGroup>{
                            {.params = {m->W}, .lr = {}, .weight_decay = {}, .lr_scale = bad}},
                        {.lr = 0.1}),
                    Error);
  }
}

TEST_CASE("parameters without a gradient are skipped and keep no state") {
  Tensor used = ones({3}, {.dtype = kFloat64, .requires_grad = true});
  Tensor unused = ones({2}, {.dtype = kFloat64, .requires_grad = true});
  optim::AdamW opt({used, unused}, {.lr = 0.1, .weight_decay = 0.1});
  sum(used * used).backward();
  opt.step();
  CHECK(used.to_vector<double>()[0] < 1.0);
  // Decoupled decay does not touch a parameter without a gradient either, as in PyTorch.
  CHECK(unused.to_vector<double>() == std::vector<double>{1.0, 1.0});
  CHECK(opt.step_count(0) == 1);
  CHECK(opt.step_count(1) == 0);
  for (const auto& [name, t] : opt.state_dict()) CHECK(name.rfind("state.1.", 0) != 0);
  opt.zero_grad();
  CHECK(!used.grad().defined());
  opt.step();  // no gradients at all: nothing moves
  CHECK(opt.step_count(0) == 1);
}

TEST_CASE("float32 parameters: AdamW reduces a regression loss") {
  auto fc = std::make_shared<nn::Linear>(4, 2);
  const Tensor x = randn({16, 4});
  const Tensor target = matmul(x, from<float>({1, -2, 0.5, 3, -1, 0, 2, 1}, {4, 2}));
  optim::AdamW opt(optim::decay_groups(*fc, 0.01), {.lr = 0.05});
  auto loss_of = [&] { return mean(pow(fc->forward(x) - target, 2.0)); };
  const float first = loss_of().item<float>();
  for (int i = 0; i < 50; ++i) {
    opt.zero_grad();
    loss_of().backward();
    opt.step();
  }
  CHECK(fc->weight.dtype() == kFloat32);
  CHECK(loss_of().item<float>() < 0.1f * first);
}

TEST_CASE("resuming from model + optimizer state gives the uninterrupted run's values") {
  const json& ref = reference();
  const Tensor x = tensor_from(ref["x"]);
  const Tensor y = tensor_from(ref["y"]);
  for (const json& c : ref["cases"]) {
    INFO(c["optimizer"].get<std::string>());
    auto straight = fixture_model();
    auto opt_straight = make_optimizer(c, *straight);
    for (int i = 0; i < 5; ++i) train_step(*opt_straight, *straight, x, y);

    auto first = fixture_model();
    auto opt_first = make_optimizer(c, *first);
    for (int i = 0; i < 3; ++i) train_step(*opt_first, *first, x, y);
    const nn::StateDict model_state = first->state_dict();
    const nn::StateDict optim_state = opt_first->state_dict();

    // A fresh model and optimizer (as after a restart) continue from the saved state.
    auto resumed = fixture_model();
    auto opt_resumed = make_optimizer(c, *resumed);
    resumed->load_state_dict(model_state);
    opt_resumed->load_state_dict(optim_state);
    // The first run goes on; the resumed one must not share anything with it.
    train_step(*opt_first, *first, x, y);
    for (int i = 0; i < 2; ++i) train_step(*opt_resumed, *resumed, x, y);

    CHECK(resumed->W.to_vector<double>() == straight->W.to_vector<double>());
    CHECK(resumed->b.to_vector<double>() == straight->b.to_vector<double>());
    if (c["optimizer"] != "SGD") CHECK(opt_resumed->step_count(0) == 5);
  }
}

TEST_CASE("optimizer state_dict names and load errors") {
  auto m = fixture_model();
  optim::AdamW opt(
      std::vector<optim::ParamGroup>{{.params = {m->W}, .lr = {}, .weight_decay = {}},
                                     {.params = {m->b}, .lr = {}, .weight_decay = {}}});
  m->W.set_grad(ones_like(m->W));
  opt.step();  // only W has state
  const nn::StateDict sd = opt.state_dict();
  std::vector<std::string> names;
  for (const auto& [name, t] : sd) names.push_back(name);
  CHECK(names == std::vector<std::string>{"param_groups.0.lr", "param_groups.0.weight_decay",
                                          "param_groups.0.params", "param_groups.1.lr",
                                          "param_groups.1.weight_decay", "param_groups.1.params",
                                          "state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq"});
  CHECK(sd[6].second.item<std::int64_t>() == 1);
  CHECK(sd[7].second.shape() == m->W.shape());

  auto with = [&](const std::string& key, const Tensor& t) {
    nn::StateDict copy = sd;
    for (auto& [name, value] : copy) {
      if (name == key) value = t;
    }
    return copy;
  };
  auto without = [&](const std::string& key) {
    nn::StateDict copy;
    for (const auto& e : sd) {
      if (e.first != key) copy.push_back(e);
    }
    return copy;
  };
  auto fails_with = [&](const nn::StateDict& bad, const std::string& needle) {
    const auto before = opt.state_dict();
    try {
      opt.load_state_dict(bad);
      FAIL("expected an Error mentioning ", needle);
    } catch (const Error& e) {
      CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
      CHECK_MESSAGE(std::string(e.what()).find("AdamW::load_state_dict") != std::string::npos,
                    e.what());
    }
    // Nothing changed.
    CHECK(opt.state_dict().size() == before.size());
    CHECK(opt.step_count(0) == 1);
  };
  fails_with(with("state.0.exp_avg", zeros({2, 2}, {.dtype = kFloat64})), "state.0.exp_avg");
  fails_with(with("state.0.step", scalar_tensor(1.5, {.dtype = kFloat64})), "int64 scalar");
  fails_with(with("param_groups.0.lr", scalar_tensor(-1.0, {.dtype = kFloat64})), ">= 0");
  fails_with(with("param_groups.1.params", from<std::int64_t>({0}, {1})), "groups differ");
  fails_with(without("state.0.exp_avg_sq"), "missing entry \"state.0.exp_avg_sq\"");
  fails_with(without("param_groups.1.lr"), "missing entry \"param_groups.1.lr\"");
  nn::StateDict extra = sd;
  extra.emplace_back("state.0.momentum_buffer", zeros_like(m->W));
  fails_with(extra, "unexpected entry \"state.0.momentum_buffer\"");
  extra = sd;
  extra.emplace_back("state.7.exp_avg", zeros_like(m->W));
  fails_with(extra, "names parameter 7");
  extra = sd;
  extra.emplace_back("lr", scalar_tensor(1.0));
  fails_with(extra, "unexpected entry \"lr\"");
  extra = sd;
  extra.push_back(sd[0]);
  fails_with(extra, "appears twice");

  // SGD state (with the same groups) does not load into AdamW.
  optim::SGD sgd(std::vector<optim::ParamGroup>{{.params = {m->W}, .lr = {}, .weight_decay = {}},
                                                {.params = {m->b}, .lr = {}, .weight_decay = {}}},
                 {.lr = 0.1, .momentum = 0.9});
  sgd.step();
  fails_with(sgd.state_dict(), "momentum_buffer");
}

TEST_CASE("optimizer construction and step validate their input") {
  Tensor p = ones({2}, {.requires_grad = true});
  Tensor q = ones({2}, {.requires_grad = true});
  CHECK_THROWS_AS(optim::SGD(std::vector<Tensor>{}), Error);
  CHECK_THROWS_AS(optim::SGD({p, p}), Error);
  CHECK_THROWS_AS(optim::SGD({Tensor()}), Error);
  CHECK_THROWS_AS(optim::SGD({p * 2.0}), Error);    // not a leaf
  CHECK_THROWS_AS(optim::SGD({arange(3)}), Error);  // not floating
  CHECK_THROWS_AS(optim::SGD({p}, {.lr = -1.0}), Error);
  CHECK_THROWS_AS(optim::SGD({p}, {.lr = 0.1, .nesterov = true}), Error);
  CHECK_THROWS_AS(optim::SGD({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}),
                  Error);
  CHECK_THROWS_AS(optim::SGD({p}, {.momentum = -0.5}), Error);
  CHECK_THROWS_AS(optim::Adam({p}, {.betas = {1.0, 0.999}}), Error);
  CHECK_THROWS_AS(optim::Adam({p}, {.betas = {0.9, -0.1}}), Error);
  CHECK_THROWS_AS(optim::AdamW({p}, {.eps = -1e-8}), Error);
  CHECK_THROWS_AS(optim::AdamW({p}, {.weight_decay = -0.1}), Error);
  CHECK_THROWS_AS(
      optim::AdamW(std::vector<optim::ParamGroup>{{.params = {p}, .lr = {}, .weight_decay = {}},
                                                  {.params = {p}, .lr = {}, .weight_decay = {}}}),
      Error);
  try {
    optim::AdamW({p, q}, {}).step_count(5);
    FAIL("expected an Error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("out of range") != std::string::npos);
  }

  // A gradient of the wrong shape is refused before any parameter moves.
  optim::SGD sgd({p, q}, {.lr = 0.1});
  p.set_grad(ones({2}));
  q.impl()->grad = ones({3});
  try {
    sgd.step();
    FAIL("expected an Error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("SGD::step: the gradient of parameter 1") !=
          std::string::npos);
  }
  CHECK(p.to_vector<float>() == std::vector<float>{1.0f, 1.0f});
}

TEST_CASE("schedules: exact values at chosen steps") {
  const optim::ConstantLR constant(0.25);
  CHECK(constant.lr_at(0) == 0.25);
  CHECK(constant.lr_at(1000000) == 0.25);
  CHECK_THROWS_AS(constant.lr_at(-1), Error);

  // Warm-up over 4 steps to 1.0, then linear decay to 0 at step 12.
  const optim::WarmupLinear linear(1.0, 4, 12);
  CHECK(linear.lr_at(0) == 0.25);
  CHECK(linear.lr_at(1) == 0.5);
  CHECK(linear.lr_at(3) == 1.0);
  CHECK(linear.lr_at(4) == 1.0);
  CHECK(linear.lr_at(6) == 0.75);
  CHECK(linear.lr_at(10) == 0.25);
  CHECK(linear.lr_at(12) == 0.0);
  CHECK(linear.lr_at(100) == 0.0);

  // With a floor: decays from 2.0 to 0.5 over steps 2..8.
  const optim::WarmupLinear floor(2.0, 2, 8, 0.5);
  CHECK(floor.lr_at(0) == 1.0);
  CHECK(floor.lr_at(2) == 2.0);
  CHECK(floor.lr_at(5) == doctest::Approx(0.5 + 1.5 * 0.5).epsilon(1e-15));
  CHECK(floor.lr_at(8) == 0.5);
  CHECK(floor.lr_at(9) == 0.5);

  // Cosine: half-way through the decay it is the mean of peak and floor.
  const optim::WarmupCosine cosine(1.0, 10, 110, 0.1);
  CHECK(cosine.lr_at(0) == doctest::Approx(0.1).epsilon(1e-15));
  CHECK(cosine.lr_at(9) == 1.0);
  CHECK(cosine.lr_at(10) == 1.0);
  CHECK(cosine.lr_at(60) == doctest::Approx(0.55).epsilon(1e-15));
  CHECK(cosine.lr_at(35) ==
        doctest::Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 0.25))).epsilon(1e-15));
  CHECK(cosine.lr_at(110) == 0.1);
  CHECK(cosine.lr_at(5000) == 0.1);
  // Monotone after the warm-up.
  for (std::int64_t s = 10; s < 120; ++s) CHECK(cosine.lr_at(s + 1) <= cosine.lr_at(s));

  // No warm-up: the first step takes the peak.
  CHECK(optim::WarmupCosine(3e-4, 0, 100).lr_at(0) == 3e-4);

  CHECK_THROWS_AS(optim::WarmupLinear(1.0, 10, 5), Error);
  CHECK_THROWS_AS(optim::WarmupLinear(1.0, -1, 5), Error);
  CHECK_THROWS_AS(optim::WarmupLinear(1.0, 0, 0), Error);
  CHECK_THROWS_AS(optim::WarmupCosine(1.0, 1, 5, 2.0), Error);
  CHECK_THROWS_AS(optim::WarmupCosine(-1.0, 1, 5), Error);
  CHECK_THROWS_AS(optim::ConstantLR(std::nan("")), Error);
  CHECK_THROWS_AS(cosine.lr_at(-3), Error);

  // Applied by the loop through set_lr.
  Tensor p = ones({1}, {.requires_grad = true});
  optim::SGD sgd({p}, {.lr = 0.0});
  sgd.set_lr(linear.lr_at(6));
  CHECK(sgd.lr() == 0.75);
}

TEST_CASE("a graph kept across an optimizer step refuses a second backward (the version counter)") {
  Tensor w = from<double>({1, 2, 3}, {3});
  w.requires_grad_();
  nn::optim::SGD opt({w}, {.lr = 0.1});
  const Tensor y = sum(w * w);
  y.backward({}, /*retain_graph=*/true);
  opt.step();
  try {
    y.backward();
    FAIL("a backward through a changed parameter ran");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("modified in place") != std::string::npos);
  }
  // The same with AdamW, whose step runs one fused kernel on the parameter.
  Tensor v = from<double>({1, 2, 3}, {3});
  v.requires_grad_();
  nn::optim::AdamW adamw({v});
  const Tensor z = sum(v * v);
  z.backward({}, /*retain_graph=*/true);
  adamw.step();
  CHECK_THROWS_AS(z.backward(), Error);
}
