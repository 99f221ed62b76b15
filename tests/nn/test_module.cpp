// Module system: registration, names, state dicts, devices, printing and containers.
#include <doctest/doctest.h>

#include <tinyformer/tinyformer.h>

using namespace tinyformer;

namespace {
struct Mlp : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  Mlp() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(4, 8));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(8, 2));
  }
  Tensor forward(const Tensor& x) const { return fc2->forward(relu(fc1->forward(x))); }
  std::string type_name() const override { return "Mlp"; }
};
}  // namespace

TEST_CASE("named_parameters uses dotted names in registration order") {
  Mlp m;
  auto named = m.named_parameters();
  REQUIRE(named.size() == 4);
  CHECK(named[0].first == "fc1.weight");
  CHECK(named[1].first == "fc1.bias");
  CHECK(named[2].first == "fc2.weight");
  CHECK(named[3].first == "fc2.bias");
  CHECK(named[0].second.shape() == Shape{8, 4});
  CHECK(m.num_parameters() == 8 * 4 + 8 + 2 * 8 + 2);
  CHECK(m.children().size() == 2);
  for (const auto& p : m.parameters()) CHECK(p.requires_grad());
}

TEST_CASE("a parameter handle shares the registered tensor") {
  Mlp m;
  raw::fill(m.fc1->weight, 0.5);
  CHECK(m.named_parameters()[0].second.to_vector<float>()[3] == 0.5f);
}

TEST_CASE("state_dict round trip and load errors") {
  manual_seed(1);
  Mlp a;
  Mlp b;
  CHECK(a.fc1->weight.to_vector<float>() != b.fc1->weight.to_vector<float>());
  b.load_state_dict(a.state_dict());
  CHECK(a.fc1->weight.to_vector<float>() == b.fc1->weight.to_vector<float>());
  CHECK(a.fc2->bias.to_vector<float>() == b.fc2->bias.to_vector<float>());

  auto state = a.state_dict();
  auto missing = state;
  missing.pop_back();
  CHECK_THROWS_WITH_AS(b.load_state_dict(missing), doctest::Contains("missing entries: fc2.bias"),
                       Error);
  b.load_state_dict(missing, /*strict=*/false);
  auto unexpected = state;
  unexpected.emplace_back("fc3.weight", zeros({1}));
  CHECK_THROWS_WITH_AS(b.load_state_dict(unexpected),
                       doctest::Contains("unexpected entries: fc3.weight"), Error);
  auto misshaped = state;
  misshaped[0].second = zeros({3, 3});
  const auto before = b.fc1->weight.to_vector<float>();
  CHECK_THROWS_WITH_AS(b.load_state_dict(misshaped), doctest::Contains("fc1.weight"), Error);
  // Nothing was copied: the check comes before any write.
  CHECK(b.fc1->weight.to_vector<float>() == before);
}

TEST_CASE("train and eval reach every child; zero_grad clears gradients") {
  Mlp m;
  CHECK(m.fc1->is_training());
  m.eval();
  CHECK_FALSE(m.fc1->is_training());
  m.train();
  CHECK(m.fc2->is_training());
  sum(m.forward(randn({3, 4}))).backward();
  CHECK(m.fc1->weight.grad().defined());
  m.zero_grad();
  CHECK_FALSE(m.fc1->weight.grad().defined());
}

TEST_CASE("to(dtype) converts in place and keeps handles valid") {
  Mlp m;
  Tensor w = m.fc1->weight;
  m.to(kFloat64);
  CHECK(w.dtype() == kFloat64);
  CHECK(m.fc1->weight.dtype() == kFloat64);
  CHECK(m.forward(randn({2, 4}, {.dtype = kFloat64})).dtype() == kFloat64);
  CHECK_THROWS_AS(m.to(Device::cuda()), Error);  // no CUDA in this build or no GPU
}

TEST_CASE("registration errors") {
  nn::Module m;
  m.register_parameter("w", zeros({2}));
  CHECK_THROWS_WITH_AS(m.register_parameter("w", zeros({2})), doctest::Contains("already"), Error);
  CHECK_THROWS_AS(m.register_parameter("a.b", zeros({2})), Error);
  CHECK_THROWS_AS(m.register_parameter("", zeros({2})), Error);
  CHECK_THROWS_AS(m.register_parameter("u", Tensor()), Error);
  CHECK_THROWS_AS(m.register_module("child", std::shared_ptr<nn::Linear>()), Error);
}

TEST_CASE("a printed module shows its tree with parameter counts") {
  Mlp m;
  const std::string s = m.to_string();
  CHECK(s.find("Mlp()") != std::string::npos);
  CHECK(s.find("(fc1): Linear(in=4, out=8)  # 40 parameters") != std::string::npos);
  CHECK(s.find("# 58 parameters") != std::string::npos);
}

TEST_CASE("Sequential and ModuleList") {
  auto seq = std::make_shared<nn::Sequential>();
  seq->push_back(std::make_shared<nn::Linear>(3, 5));
  seq->push_back(std::make_shared<nn::ReLU>());
  seq->push_back(std::make_shared<nn::Linear>(5, 1));
  CHECK(seq->forward(randn({7, 3})).shape() == Shape{7, 1});
  CHECK(seq->named_parameters()[2].first == "2.weight");

  nn::ModuleList list;
  list.push_back(std::make_shared<nn::Linear>(2, 2));
  list.push_back(std::make_shared<nn::LayerNorm>(2));
  CHECK(list.size() == 2);
  CHECK(list.at<nn::LayerNorm>(1) != nullptr);
  CHECK_THROWS_AS(list.at<nn::LayerNorm>(0), Error);
  CHECK_THROWS_AS(list.at(5), Error);
}

TEST_CASE("shared tensors are listed once") {
  nn::Module parent;
  auto shared = std::make_shared<nn::Linear>(2, 2);
  parent.register_module("a", shared);
  parent.register_module("b", shared);
  CHECK(parent.named_parameters().size() == 2);
  CHECK(parent.named_parameters()[0].first == "a.weight");
}

TEST_CASE("a module tree cannot have a cycle: register_module refuses one at any depth") {
  auto a = std::make_shared<nn::Module>();
  auto b = std::make_shared<nn::Module>();
  auto c = std::make_shared<nn::Module>();
  a->register_module("b", b);
  b->register_module("c", c);
  // c -> a would close a -> b -> c -> a; b -> a would close a -> b -> a.
  try {
    c->register_module("a", a);
    FAIL("a cycle was accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("a module tree cannot have a cycle") != std::string::npos);
  }
  CHECK_THROWS_AS(b->register_module("a", a), Error);
  CHECK(c->named_children().empty());  // nothing was added
  CHECK(a->state_dict().empty());      // and every walk of the tree ends
  // A module shared by two parents (no cycle) stays allowed.
  auto d = std::make_shared<nn::Module>();
  a->register_module("d", d);
  b->register_module("d", d);
  CHECK(a->contains(*d));
  CHECK(!d->contains(*a));
}
