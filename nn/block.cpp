// The registries of encoder block parts and their built-in entries.
#include "nn/block.h"

#include <map>
#include <mutex>
#include <set>

#include "core/error.h"
#include "nn/layers.h"
#include "nn/linear.h"

namespace tinyformer::nn {

namespace {

// One registry per part: a name -> factory map behind a mutex, so that registering from one
// thread while another builds a model is safe.
template <typename Factory>
class Registry {
 public:
  Registry(const char* part, std::map<std::string, Factory> builtins)
      : part_(part), factories_(std::move(builtins)) {
    for (const auto& entry : factories_) builtins_.insert(entry.first);
  }

  void add(const std::string& name, Factory factory) {
    TF_CHECK(!name.empty() && factory != nullptr, "register_", part_,
             ": expected a name and a factory");
    std::lock_guard lock(mutex_);
    factories_[name] = std::move(factory);
    builtins_.erase(name);
  }

  bool builtin(const std::string& name) const {
    std::lock_guard lock(mutex_);
    return builtins_.count(name) != 0;
  }

  std::vector<std::string> names() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const auto& entry : factories_) out.push_back(entry.first);
    return out;
  }

  template <typename Spec>
  auto make(const std::string& name, const Spec& spec) const {
    Factory factory;
    {
      std::lock_guard lock(mutex_);
      auto it = factories_.find(name);
      if (it != factories_.end()) factory = it->second;
    }
    if (!factory) {
      std::string known;
      for (const auto& n : names()) known += (known.empty() ? "" : ", ") + n;
      fail("make_", part_, ": unknown ", part_, " \"", name, "\" (registered: ", known, ")");
    }
    auto part = factory(spec);
    TF_CHECK(part != nullptr, "make_", part_, ": the factory for \"", name, "\" returned null");
    return part;
  }

 private:
  const char* part_;
  mutable std::mutex mutex_;
  std::map<std::string, Factory> factories_;
  std::set<std::string> builtins_;  // the built-in names not replaced since
};

Registry<AttentionFactory>& attention_registry() {
  static Registry<AttentionFactory> r(
      "attention", {{"standard", [](const AttentionSpec& s) -> std::shared_ptr<Attention> {
                       const EncoderConfig& c = s.config;
                       if (s.spec.attention == AttentionKind::full)
                         return std::make_shared<MultiHeadAttention>(
                             c.d_model, c.heads, c.attention_dropout, c.fused_attention);
                       return std::make_shared<LinformerAttention>(
                           c.d_model, c.heads, s.key_projection, s.value_projection,
                           c.attention_dropout, c.fused_attention);
                     }}});
  return r;
}

Registry<FeedForwardFactory>& feed_forward_registry() {
  static Registry<FeedForwardFactory> r("feed_forward", {{"standard", [](const BlockPartSpec& s) {
                                                            return std::make_shared<FeedForward>(
                                                                s.config.d_model, s.config.d_ff,
                                                                s.config.activation,
                                                                s.config.dropout);
                                                          }}});
  return r;
}

Registry<NormFactory>& norm_registry() {
  static Registry<NormFactory> r("norm", {{"layer_norm", [](const BlockPartSpec& s) {
                                             return std::make_shared<LayerNorm>(s.config.d_model);
                                           }}});
  return r;
}

}  // namespace

void register_attention(const std::string& name, AttentionFactory factory) {
  attention_registry().add(name, std::move(factory));
}
void register_feed_forward(const std::string& name, FeedForwardFactory factory) {
  feed_forward_registry().add(name, std::move(factory));
}
void register_norm(const std::string& name, NormFactory factory) {
  norm_registry().add(name, std::move(factory));
}

std::vector<std::string> attention_names() {
  return attention_registry().names();
}
std::vector<std::string> feed_forward_names() {
  return feed_forward_registry().names();
}
std::vector<std::string> norm_names() {
  return norm_registry().names();
}

bool is_builtin_attention(const std::string& name) {
  return attention_registry().builtin(name);
}
bool is_builtin_feed_forward(const std::string& name) {
  return feed_forward_registry().builtin(name);
}
bool is_builtin_norm(const std::string& name) {
  return norm_registry().builtin(name);
}

std::shared_ptr<Attention> make_attention(const std::string& name, const AttentionSpec& spec) {
  return attention_registry().make(name, spec);
}
std::shared_ptr<FeedForwardModule> make_feed_forward(const std::string& name,
                                                     const BlockPartSpec& spec) {
  return feed_forward_registry().make(name, spec);
}
std::shared_ptr<NormModule> make_norm(const std::string& name, const BlockPartSpec& spec) {
  return norm_registry().make(name, spec);
}

}  // namespace tinyformer::nn
