// Communication between the processes of a data-parallel job: start-up from the launcher's
// environment (`mpirun -np N`), rank and size, barrier, broadcast and all-reduce of tensors, and
// the job's end. CPU tensors go through MPI; CUDA tensors through the device's backend (NCCL,
// queued on the backend's stream), whose communicator's id is sent over MPI. A build without MPI
// compiles all of this, and init() says that the build has none.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/tensor.h"

namespace tinyformer::distributed {

// Whether this build has MPI (CMake's TINYFORMER_MPI found Open MPI).
bool available();
// Whether the process was started by an MPI launcher (mpirun, srun with PMI): its environment
// names a rank.
bool launched();

// Starts MPI from the launcher's environment (MPI_Init_thread, with only the calling thread
// making MPI calls), once; later calls do nothing. Every process of the job calls it. From then
// on, an uncaught exception prints its message with the rank and aborts the whole job
// (MPI_Abort), so that the other processes do not wait forever in a collective. Throws Error
// in a build without MPI.
void init();
bool is_initialized();
// This process's number in [0, world_size()), and the number of processes; 0 and 1 before
// init() (a single process is a world of one).
int rank();
int world_size();
// The rank among the processes on this machine, and their number (1 before init()).
int local_rank();
int local_world_size();
// Ends the job cleanly (MPI_Finalize) after every process got here; the device communicators
// go first. Later collectives throw; init() does not start MPI again.
void shutdown();
// The collective timeout, in seconds (0: none): a blocking collective below (barrier, broadcast,
// all_reduce, Work::wait, the scalar ones, and init() and shutdown(), which wait for every
// process too) that has waited this long for the other processes ends the whole job
// (MPI_Abort), printing "rank R: <collective> has waited S s for the other processes ...": a
// process that stopped, or processes that call different collectives, cannot hang a job. A
// thread started by init() watches; each collective only records its start and end. Unless set
// here, the timeout is the environment's TINYFORMER_COLLECTIVE_TIMEOUT, else
// kDefaultCollectiveTimeout (600 s, watchdog.h). Setting it applies at once, before or after
// init(). Throws Error for a negative or non-finite value, and collective_timeout() and init()
// for a malformed TINYFORMER_COLLECTIVE_TIMEOUT.
void set_collective_timeout(double seconds);
double collective_timeout();

// Prints "rank R: <message>" on stderr and ends every process of the job with `status`
// (MPI_Abort): for a process that fails while the others may be waiting on it. Without MPI
// running, exits this process.
[[noreturn]] void abort(std::string_view message, int status = 1);

// What an all-reduce computes: the sum over processes, or the sum divided by their number
// (floating dtypes). A bool tensor's sum is the logical or.
enum class Reduction { sum, mean };

// The result of an asynchronous collective. test() asks whether it has finished (and lets MPI
// make progress); wait() blocks until it has and completes the operation (the mean's division,
// the copy back into a tensor that was not contiguous). A default-constructed Work is complete.
class Work {
 public:
  struct State;
  Work() = default;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}
  bool test();
  void wait();

 private:
  std::shared_ptr<State> state_;
};

// Collectives: every process calls them in the same order, with tensors of the same shape,
// dtype and device type. They work in place, on any dtype (float32, float64, bfloat16, int64,
// bool) and any layout.
void barrier();
// t = root's t.
void broadcast(const Tensor& t, int root = 0);
// t = the reduction over processes of t.
void all_reduce(const Tensor& t, Reduction op = Reduction::sum);
// all_reduce that returns at once (MPI_Iallreduce); t must not be read or written until wait().
// On a GPU the reduction is queued on the device's stream, and the Work is complete at once.
Work all_reduce_async(const Tensor& t, Reduction op = Reduction::sum);

// Small host values, for checks that every process agrees (model shapes, flags).
std::string broadcast_string(const std::string& text, int root = 0);
std::int64_t all_reduce_max(std::int64_t value);
std::int64_t all_reduce_min(std::int64_t value);

}  // namespace tinyformer::distributed
