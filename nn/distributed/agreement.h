// The start-up check of a data-parallel job: every process must train the same model on the same
// data with the same flags, seed and schedule, or the job stops at once, naming the difference.
// Nothing else would notice: the data-parallel wrapper compares parameter shapes only, so other
// data, another learning rate or seed train silently apart, and another step count leaves
// processes waiting in collectives that the others never call.
#pragma once

#include <map>
#include <string>

namespace tinyformer::distributed {

// Settings that must be equal on every process, by name: flags ("--steps" -> "4000"), the
// model's description, the data's identity (its size and a hash of its contents), the seed.
using Settings = std::map<std::string, std::string>;

// A collective: every process calls it at the same point with its own settings. Rank 0's are
// broadcast, every process compares them with its own, and when any process differs, every
// process throws the same Error, naming the first name (in sorted order) in which the lowest
// differing rank differs, with rank 0's value and that rank's:
//
//   the processes of this job were started differently: --steps is 40 on rank 0 but 30 on
//   rank 1; start every process with the same flags and data
//
// A name missing on one side reads "not set"; values longer than 80 characters are cut. In a
// world of one (before init(), or one process) there is nothing to compare and it returns.
// nn::TrainingRun calls it with the run's configuration; a loop of one's own calls it before
// its first step.
void check_agreement(const Settings& settings);

}  // namespace tinyformer::distributed
