// A deterministic, resumable batch sampler: the examples of a dataset in a shuffled order drawn
// from (seed, epoch), cut into batches; its position can be saved with a checkpoint and restored
// so that a resumed run sees exactly the batches the interrupted one would have seen.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tinyformer::nn::data {

// Where a Loader stands: the epoch, and how many examples of that epoch's order were consumed.
// The seed and the dataset size come along so that restoring into a loader built differently is
// caught instead of silently giving other batches.
struct LoaderState {
  std::int64_t epoch = 0;
  std::int64_t position = 0;
  std::uint64_t seed = 0;
  std::int64_t dataset_size = 0;

  // As checkpoint metadata: "epoch=2 position=64 seed=42 dataset_size=1000". parse refuses a
  // malformed text, a key given twice and an epoch above kMaxEpoch (a counter that far could
  // overflow).
  std::string to_string() const;
  static constexpr std::int64_t kMaxEpoch = std::int64_t{1} << 53;
  static LoaderState parse(const std::string& text);
  // As an int64 tensor [4] (epoch, position, seed's bits, dataset_size).
  Tensor to_tensor() const;
  static LoaderState from_tensor(const Tensor& t);

  bool operator==(const LoaderState&) const = default;
};

// Data-parallel training shards every batch: batch_size is the global batch, the one a single
// process would take, and the process `rank` of `world_size` gets its slice number `rank` of
// it (world_size equal, contiguous slices). The order and the position do not depend on the
// sharding, so the processes together see exactly the single process's batches, and a
// position saved with one world size resumes under another with the same batch_size.
struct LoaderOptions {
  std::int64_t batch_size = 32;
  bool shuffle = true;     // false: 0, 1, 2, ... every epoch
  bool drop_last = false;  // leave out an epoch's last batch when it is smaller than batch_size
  std::uint64_t seed = 0;
  std::int64_t rank = 0;        // this process's shard, in [0, world_size)
  std::int64_t world_size = 1;  // must divide batch_size
};

struct LoaderBatch {
  std::int64_t epoch;  // the epoch the batch belongs to
  std::int64_t step;   // its number within that epoch, from 0
  // This process's dataset indices: batch_size / world_size of them (fewer only in an epoch's
  // last batch without drop_last, where the slices are as even as can be and may be empty).
  std::vector<std::int64_t> indices;
  std::int64_t global_size = 0;  // examples in the whole batch, every process's together
};

class Loader {
 public:
  Loader(std::int64_t dataset_size, const LoaderOptions& options);

  // The next batch; after an epoch's last batch, the next call starts the following epoch.
  LoaderBatch next();
  // True when the current epoch has no batch left (the next call to next() starts a new epoch).
  bool epoch_finished() const;

  std::int64_t batches_per_epoch() const;
  std::int64_t dataset_size() const { return dataset_size_; }
  const LoaderOptions& options() const { return options_; }
  // The order of the examples in `epoch`: a permutation drawn from mix_seed(seed, epoch).
  std::vector<std::int64_t> epoch_order(std::int64_t epoch) const;

  LoaderState state() const;
  // Continues from `state`; throws when it was saved by a loader with another seed or size.
  void load_state(const LoaderState& state);

 private:
  void set_epoch(std::int64_t epoch);

  std::int64_t dataset_size_;
  LoaderOptions options_;
  std::int64_t epoch_ = 0;
  std::int64_t position_ = 0;
  std::vector<std::int64_t> order_;  // epoch_order(epoch_)
};

}  // namespace tinyformer::nn::data
