// Loader: seeded per-epoch shuffles, batches, and a position that survives a checkpoint.
#include "nn/data/loader.h"

#include <algorithm>
#include <charconv>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "core/error.h"
#include "nn/data/data_rng.h"

namespace tinyformer::nn::data {

std::string LoaderState::to_string() const {
  std::ostringstream s;
  s << "epoch=" << epoch << " position=" << position << " seed=" << seed
    << " dataset_size=" << dataset_size;
  return s.str();
}

LoaderState LoaderState::parse(const std::string& text) {
  // Keys and values are separated by single spaces; other whitespace is not written and not
  // read.
  TF_CHECK(text.find_first_of("\t\n\r\v\f") == std::string::npos,
           "LoaderState::parse: unexpected whitespace in '", text, "'");
  std::istringstream s(text);
  LoaderState state;
  bool seen[4] = {};
  static const char* keys[4] = {"epoch", "position", "seed", "dataset_size"};
  std::string item;
  while (s >> item) {
    const auto eq = item.find('=');
    TF_CHECK(eq != std::string::npos, "LoaderState::parse: expected key=value, got '", item,
             "' in '", text, "'");
    const std::string key = item.substr(0, eq);
    const std::string value = item.substr(eq + 1);
    const auto slot = std::find(keys, keys + 4, key) - keys;
    TF_CHECK(slot < 4, "LoaderState::parse: unknown key '", key, "' in '", text, "'");
    TF_CHECK(!seen[slot], "LoaderState::parse: '", key, "' appears twice in '", text, "'");
    // Plain decimal digits only (std::from_chars: no sign, no space, no exponent); every field
    // is non-negative, and a "-1" must not wrap around to a huge seed.
    const char* begin = value.data();
    const char* end = begin + value.size();
    bool ok = begin != end && *begin >= '0' && *begin <= '9';
    if (ok && slot == 2) {
      const auto [ptr, ec] = std::from_chars(begin, end, state.seed);
      ok = ec == std::errc() && ptr == end;
    } else if (ok) {
      std::int64_t v = 0;
      const auto [ptr, ec] = std::from_chars(begin, end, v);
      ok = ec == std::errc() && ptr == end;
      (slot == 0 ? state.epoch : slot == 1 ? state.position : state.dataset_size) = v;
    }
    TF_CHECK(ok, "LoaderState::parse: '", value, "' is not a valid value for ", key, " in '", text,
             "'");
    seen[slot] = true;
  }
  for (int i = 0; i < 4; ++i) {
    TF_CHECK(seen[i], "LoaderState::parse: '", keys[i], "' is missing in '", text,
             "'; expected 'epoch=E position=P seed=S dataset_size=N'");
  }
  TF_CHECK(state.epoch >= 0 && state.position >= 0 && state.dataset_size > 0,
           "LoaderState::parse: negative or zero field in '", text, "'");
  TF_CHECK(state.epoch <= kMaxEpoch, "LoaderState::parse: epoch ", state.epoch, " in '", text,
           "' exceeds ", kMaxEpoch);
  return state;
}

Tensor LoaderState::to_tensor() const {
  return from(
      std::vector<std::int64_t>{epoch, position, static_cast<std::int64_t>(seed), dataset_size},
      {4});
}

LoaderState LoaderState::from_tensor(const Tensor& t) {
  TF_CHECK(t.defined() && t.dtype() == DType::int64 && t.shape() == Shape{4},
           "LoaderState::from_tensor: expected an int64 tensor of shape [4]");
  const std::vector<std::int64_t> v = t.to_vector<std::int64_t>();
  TF_CHECK(v[0] >= 0 && v[1] >= 0 && v[3] > 0,
           "LoaderState::from_tensor: expected epoch >= 0, position >= 0 and dataset_size > 0, "
           "got ",
           v[0], ", ", v[1], ", ", v[3]);
  return {v[0], v[1], static_cast<std::uint64_t>(v[2]), v[3]};
}

Loader::Loader(std::int64_t dataset_size, const LoaderOptions& options)
    : dataset_size_(dataset_size), options_(options) {
  TF_CHECK(dataset_size > 0, "Loader: expected a non-empty dataset, got size ", dataset_size);
  TF_CHECK(options.batch_size > 0, "Loader: expected batch_size > 0, got ", options.batch_size);
  TF_CHECK(!options.drop_last || options.batch_size <= dataset_size, "Loader: with drop_last, ",
           "batch_size ", options.batch_size, " > dataset size ", dataset_size,
           " leaves no batch at all");
  TF_CHECK(options.world_size >= 1 && options.rank >= 0 && options.rank < options.world_size,
           "Loader: expected 0 <= rank < world_size, got rank ", options.rank, " of world_size ",
           options.world_size);
  TF_CHECK(options.batch_size % options.world_size == 0, "Loader: batch_size ", options.batch_size,
           " does not split evenly over ", options.world_size, " processes; use a multiple of ",
           options.world_size);
  set_epoch(0);
}

std::vector<std::int64_t> Loader::epoch_order(std::int64_t epoch) const {
  TF_CHECK(epoch >= 0, "Loader::epoch_order: expected an epoch >= 0, got ", epoch);
  if (!options_.shuffle) {
    std::vector<std::int64_t> order(static_cast<std::size_t>(dataset_size_));
    std::iota(order.begin(), order.end(), std::int64_t{0});
    return order;
  }
  Rng rng(mix_seed(options_.seed, static_cast<std::uint64_t>(epoch)));
  return permutation(dataset_size_, rng);
}

void Loader::set_epoch(std::int64_t epoch) {
  epoch_ = epoch;
  position_ = 0;
  order_ = epoch_order(epoch);
}

std::int64_t Loader::batches_per_epoch() const {
  const std::int64_t b = options_.batch_size;
  return options_.drop_last ? dataset_size_ / b : (dataset_size_ + b - 1) / b;
}

bool Loader::epoch_finished() const {
  const std::int64_t left = dataset_size_ - position_;
  return left == 0 || (options_.drop_last && left < options_.batch_size);
}

LoaderBatch Loader::next() {
  if (epoch_finished()) set_epoch(epoch_ + 1);
  const std::int64_t count = std::min(options_.batch_size, dataset_size_ - position_);
  LoaderBatch batch{epoch_, position_ / options_.batch_size, {}, count};
  // This process's slice of the global batch: [count * rank / world, count * (rank + 1) / world).
  const std::int64_t first = count * options_.rank / options_.world_size;
  const std::int64_t last = count * (options_.rank + 1) / options_.world_size;
  const auto begin = order_.begin() + position_;
  batch.indices.assign(begin + first, begin + last);
  position_ += count;
  return batch;
}

LoaderState Loader::state() const {
  return {epoch_, position_, options_.seed, dataset_size_};
}

void Loader::load_state(const LoaderState& state) {
  TF_CHECK(state.seed == options_.seed, "Loader::load_state: the state was saved with seed ",
           state.seed, " but this loader has seed ", options_.seed);
  TF_CHECK(state.dataset_size == dataset_size_, "Loader::load_state: the state was saved for a ",
           "dataset of ", state.dataset_size, " examples, this loader has ", dataset_size_);
  TF_CHECK(state.epoch >= 0 && state.epoch <= LoaderState::kMaxEpoch && state.position >= 0 &&
               state.position <= dataset_size_,
           "Loader::load_state: expected 0 <= epoch <= ", LoaderState::kMaxEpoch,
           " and 0 <= position <= ", dataset_size_, ", got epoch ", state.epoch, " and position ",
           state.position);
  set_epoch(state.epoch);
  position_ = state.position;
}

}  // namespace tinyformer::nn::data
