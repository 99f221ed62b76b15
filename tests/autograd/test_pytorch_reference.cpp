// Forward values and gradients against PyTorch, from the JSON fixtures that
// tests/fixtures/make_fixtures.py writes (inputs, output, projection r, d sum(out * r) / d input).
// Everything runs in float64, so the tolerance only has to absorb summation order.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/ops.h"

namespace tf = tinyformer;
using json = nlohmann::json;

namespace {

constexpr double kAtol = 1e-10;
constexpr double kRtol = 1e-10;

json load_fixture(const std::string& name) {
  const std::string path = std::string(TINYFORMER_FIXTURES) + "/" + name + ".json";
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot open ", path);
  json file = json::parse(in);
  REQUIRE(file.contains("cases"));
  REQUIRE(!file["cases"].empty());
  return file["cases"];
}

tf::Tensor tensor_from(const json& j) {
  const tf::Shape shape = j.at("shape").get<tf::Shape>();
  if (j.at("dtype") == "int64") {
    return tf::from(j.at("data").get<std::vector<std::int64_t>>(), shape);
  }
  return tf::from(j.at("data").get<std::vector<double>>(), shape);
}

// Element-wise |got - want| <= atol + rtol * |want|, with the first offending element named.
void check_close(const tf::Tensor& got, const json& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.defined());
  CHECK(got.dtype() == tf::kFloat64);
  REQUIRE(tf::shape_str(got.shape()) == tf::shape_str(want.at("shape").get<tf::Shape>()));
  const std::vector<double> g = got.to_vector<double>();
  const std::vector<double> w = want.at("data").get<std::vector<double>>();
  REQUIRE(g.size() == w.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (!(std::abs(g[i] - w[i]) <= kAtol + kRtol * std::abs(w[i]))) {
      std::ostringstream message;
      message << std::setprecision(17) << "element " << i << ": got " << g[i] << ", PyTorch gives "
              << w[i];
      FAIL_CHECK(message.str());
      return;
    }
  }
}

tf::Reduction reduction_from(const std::string& name) {
  if (name == "none") return tf::Reduction::none;
  if (name == "sum") return tf::Reduction::sum;
  return tf::Reduction::mean;
}

using OpFn = std::function<tf::Tensor(const std::vector<tf::Tensor>&, const json&)>;

// The fixture's op name -> the call that reproduces it (inputs in the fixture's order).
const std::map<std::string, OpFn>& ops() {
  static const std::map<std::string, OpFn> table = {
      {"matmul", [](const auto& in, const json&) { return tf::matmul(in[0], in[1]); }},
      {"softmax",
       [](const auto& in, const json& a) { return tf::softmax(in[0], a.at("dim").get<int>()); }},
      {"log_softmax", [](const auto& in,
                         const json& a) { return tf::log_softmax(in[0], a.at("dim").get<int>()); }},
      {"layer_norm",
       [](const auto& in, const json& a) {
         return tf::layer_norm(in[0], a.at("normalized_shape").get<tf::Shape>(),
                               in.size() > 1 ? in[1] : tf::Tensor(),
                               in.size() > 2 ? in[2] : tf::Tensor(), a.at("eps").get<double>());
       }},
      {"cross_entropy",
       [](const auto& in, const json& a) {
         return tf::cross_entropy(in[0], in[1], a.at("ignore_index").get<std::int64_t>(),
                                  reduction_from(a.at("reduction").get<std::string>()));
       }},
      {"gelu",
       [](const auto& in, const json& a) {
         return tf::gelu(in[0], a.at("approximate") == "tanh" ? tf::GeluApproximation::tanh
                                                              : tf::GeluApproximation::none);
       }},
      {"conv1d",
       [](const auto& in, const json& a) {
         return tf::conv1d(in[0], in[1], in.size() > 2 ? in[2] : tf::Tensor(),
                           a.at("stride").get<std::int64_t>(), a.at("padding").get<std::int64_t>());
       }},
      {"avg_pool1d",
       [](const auto& in, const json& a) {
         return tf::avg_pool1d(in[0], a.at("kernel").get<std::int64_t>(),
                               a.at("stride").get<std::int64_t>());
       }},
      {"max_pool1d",
       [](const auto& in, const json& a) {
         return tf::max_pool1d(in[0], a.at("kernel").get<std::int64_t>(),
                               a.at("stride").get<std::int64_t>());
       }},
      {"var",
       [](const auto& in, const json& a) {
         return tf::var(in[0], a.at("dims").get<tf::Shape>(), a.at("unbiased").get<bool>(),
                        a.at("keepdim").get<bool>());
       }},
      {"embedding", [](const auto& in, const json&) { return tf::embedding(in[0], in[1]); }},
  };
  return table;
}

// Runs every case of one fixture file: forward against PyTorch's output, then the gradient of
// sum(out * r) against PyTorch's for each floating input.
void run_fixture(const std::string& name) {
  const json cases = load_fixture(name);
  int index = 0;
  for (const json& c : cases) {
    const std::string op = c.at("op");
    CAPTURE(name);
    CAPTURE(index);
    INFO(op, ": ", c.value("note", std::string()));
    ++index;
    REQUIRE_MESSAGE(ops().count(op) == 1, "no C++ call for fixture op ", op);

    std::vector<tf::Tensor> inputs;
    std::vector<std::string> names;
    for (const json& in : c.at("inputs")) {
      tf::Tensor t = tensor_from(in);
      if (tf::is_floating(t.dtype())) t.requires_grad_();
      inputs.push_back(t);
      names.push_back(in.at("name"));
    }

    tf::Tensor out = ops().at(op)(inputs, c.at("args"));
    check_close(out, c.at("output"), op + " forward");

    tf::sum(tf::mul(out, tensor_from(c.at("r")))).backward();
    const json& grads = c.at("grads");
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (!tf::is_floating(inputs[i].dtype())) continue;
      REQUIRE(grads.contains(names[i]));
      check_close(inputs[i].grad(), grads.at(names[i]), op + " gradient of " + names[i]);
    }
  }
}

}  // namespace

TEST_CASE("pytorch reference: matmul with broadcast batch dims, 1-D operands") {
  run_fixture("matmul");
}
TEST_CASE("pytorch reference: softmax and log_softmax along any dim") {
  run_fixture("softmax");
}
TEST_CASE("pytorch reference: layer_norm with and without weight and bias") {
  run_fixture("layer_norm");
}
TEST_CASE("pytorch reference: cross_entropy with ignore_index and every reduction") {
  run_fixture("cross_entropy");
}
TEST_CASE("pytorch reference: gelu exact and tanh approximation") {
  run_fixture("gelu");
}
TEST_CASE("pytorch reference: conv1d with stride and padding") {
  run_fixture("conv1d");
}
TEST_CASE("pytorch reference: avg_pool1d and max_pool1d") {
  run_fixture("pool");
}
TEST_CASE("pytorch reference: var, unbiased and biased, keepdim") {
  run_fixture("var");
}
TEST_CASE("pytorch reference: embedding with repeated indices") {
  run_fixture("embedding");
}
