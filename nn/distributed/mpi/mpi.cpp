// nn/distributed/distributed.h on MPI's C API: CPU tensors are reduced and broadcast by MPI on a
// duplicate of MPI_COMM_WORLD whose errors return (and become Errors) instead of aborting;
// CUDA tensors by the device backend's communicator, built on first use from an id that rank 0
// makes and MPI broadcasts. Every blocking call runs under the collectives' watchdog.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <vector>

#include "autograd/ops.h"
#include "core/backend.h"
#include "core/error.h"
#include "nn/distributed/distributed.h"
#include "nn/distributed/watchdog.h"

namespace tinyformer::distributed {

namespace {

struct ProcessState {
  bool initialized = false;  // init() ran
  bool finalized = false;    // shutdown() ran
  bool owns_mpi = false;     // init() started MPI (a program may have started it itself)
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::terminate_handler previous_terminate = nullptr;
  // One communicator per GPU this process reduces on, by device index.
  std::map<int, std::unique_ptr<DeviceCommunicator>> device_comms;
  bool timeout_set = false;  // set_collective_timeout() was called
  // The rank as the watchdog's thread reads it: the launcher's until MPI says.
  std::atomic<int> shown_rank{0};
};

ProcessState& state() {
  static ProcessState s;
  return s;
}

// The rank that the launcher's environment names (for messages before MPI has started); 0 when
// none does.
int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    if (const char* text = std::getenv(name)) return std::atoi(text);
  }
  return 0;
}

// A collective that waited too long: every process of the job ends, with the reason. This runs
// on the watchdog's thread while the main thread is blocked inside MPI, so it only prints and
// aborts.
Watchdog& watchdog();

void on_collective_timeout(const char* operation, double seconds) {
  std::fprintf(stderr,
               "rank %d: %s has waited %.1f s for the other processes of the job (the collective "
               "timeout is %g s: %s, or a training program's --collective-timeout); one of them "
               "has stopped or called another collective: ending the job\n",
               state().shown_rank.load(), operation, seconds, watchdog().timeout(),
               kCollectiveTimeoutVariable);
  std::fflush(stderr);
  int running = 0;
  int finished = 0;
  MPI_Initialized(&running);
  MPI_Finalized(&finished);
  if (running && !finished) MPI_Abort(MPI_COMM_WORLD, 1);
  // Before MPI runs (or after it ended), exiting with a failure makes the launcher end the job.
  std::_Exit(1);
}

Watchdog& watchdog() {
  static Watchdog w(on_collective_timeout);
  return w;
}

void check_mpi(int code, const char* op, const char* call) {
  if (code == MPI_SUCCESS) return;
  char message[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, message, &length);
  fail(op, ": ", call, " failed: ", std::string(message, static_cast<std::size_t>(length)));
}
#define TF_MPI_CHECK(op, call) check_mpi((call), op, #call)

ProcessState& require_init(const char* op) {
  ProcessState& s = state();
  TF_CHECK(s.initialized && !s.finalized, op, ": expected a running distributed job, but ",
           s.finalized ? "distributed::shutdown() has ended it"
                       : "distributed::init() has not been called");
  return s;
}

// An uncaught exception on one rank would leave the others waiting in their next collective;
// MPI_Abort ends them all, with the message.
[[noreturn]] void on_terminate() {
  std::string what = "std::terminate called without an active exception";
  if (std::exception_ptr error = std::current_exception()) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      what = std::string("uncaught exception: ") + e.what();
    } catch (...) {
      what = "uncaught exception of an unknown type";
    }
  }
  std::fprintf(stderr, "rank %d: %s\n", state().rank, what.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::float32:
      return MPI_FLOAT;
    case DType::float64:
      return MPI_DOUBLE;
    case DType::int64:
      return MPI_INT64_T;
    case DType::boolean:
      return MPI_C_BOOL;
    case DType::bfloat16:
      break;  // MPI has no bfloat16: reduced as float32
  }
  fail("all_reduce: no MPI type for ", dtype);
}

DeviceCommunicator& device_communicator(ProcessState& s, Device device) {
  auto& comm = s.device_comms[device.index];
  if (!comm) {
    // The device library's set-up waits until every process has joined.
    const Watchdog::Scope watched(watchdog(), "the GPU communicator's set-up");
    Backend& b = backend(device);
    std::string id;
    if (s.rank == 0) {
      const std::vector<std::uint8_t> bytes = b.communicator_id();
      id.assign(bytes.begin(), bytes.end());
    }
    id = broadcast_string(id, 0);
    comm = b.communicator(std::vector<std::uint8_t>(id.begin(), id.end()), s.rank, s.size, device);
  }
  return *comm;
}

}  // namespace

// The tensor the caller passed, the contiguous buffer MPI reduces in (the tensor itself when it
// is contiguous and MPI has its dtype), and the requests in flight.
struct Work::State {
  Tensor target;
  Tensor buffer;
  bool mean = false;
  int world = 1;
  std::vector<MPI_Request> requests;
  bool done = false;

  void finish() {
    done = true;
    if (mean) {
      NoGradGuard no_grad;
      raw::copy(div(buffer, scalar_tensor(world, {.dtype = buffer.dtype()})), target);
    } else if (!buffer.is_same(target)) {
      raw::copy(buffer, target);
    }
    buffer = Tensor();
    target = Tensor();
  }
};

bool available() {
  return true;
}

bool launched() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "PMI_SIZE"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

void init() {
  ProcessState& s = state();
  if (s.initialized) return;
  TF_CHECK(!s.finalized, "init: distributed::shutdown() has ended the job; MPI cannot start again");
  s.shown_rank = launcher_rank();
  watchdog().set_timeout(collective_timeout());
  // MPI's start, the communicators' duplication and split wait for every process.
  const Watchdog::Scope watched(watchdog(), "init");
  int running = 0;
  TF_MPI_CHECK("init", MPI_Initialized(&running));
  if (!running) {
    int provided = 0;
    TF_MPI_CHECK("init", MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
    s.owns_mpi = true;
  }
  TF_MPI_CHECK("init", MPI_Comm_dup(MPI_COMM_WORLD, &s.comm));
  TF_MPI_CHECK("init", MPI_Comm_set_errhandler(s.comm, MPI_ERRORS_RETURN));
  TF_MPI_CHECK("init", MPI_Comm_rank(s.comm, &s.rank));
  TF_MPI_CHECK("init", MPI_Comm_size(s.comm, &s.size));
  s.shown_rank = s.rank;
  MPI_Comm node = MPI_COMM_NULL;
  TF_MPI_CHECK("init",
               MPI_Comm_split_type(s.comm, MPI_COMM_TYPE_SHARED, s.rank, MPI_INFO_NULL, &node));
  TF_MPI_CHECK("init", MPI_Comm_rank(node, &s.local_rank));
  TF_MPI_CHECK("init", MPI_Comm_size(node, &s.local_size));
  MPI_Comm_free(&node);
  s.previous_terminate = std::set_terminate(on_terminate);
  s.initialized = true;
}

bool is_initialized() {
  return state().initialized && !state().finalized;
}

int rank() {
  return is_initialized() ? state().rank : 0;
}

int world_size() {
  return is_initialized() ? state().size : 1;
}

int local_rank() {
  return is_initialized() ? state().local_rank : 0;
}

int local_world_size() {
  return is_initialized() ? state().local_size : 1;
}

void set_collective_timeout(double seconds) {
  watchdog().set_timeout(seconds);
  state().timeout_set = true;
}

double collective_timeout() {
  return state().timeout_set || state().initialized ? watchdog().timeout()
                                                    : collective_timeout_from_environment();
}

void shutdown() {
  ProcessState& s = state();
  if (!s.initialized || s.finalized) return;
  // MPI_Finalize waits for every process.
  const Watchdog::Scope watched(watchdog(), "shutdown");
  s.device_comms.clear();
  MPI_Comm_free(&s.comm);
  if (s.owns_mpi) TF_MPI_CHECK("shutdown", MPI_Finalize());
  s.finalized = true;
  std::set_terminate(s.previous_terminate);
}

void abort(std::string_view message, int status) {
  std::fprintf(stderr, "rank %d: %.*s\n", rank(), static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
  int running = 0;
  int finished = 0;
  MPI_Initialized(&running);
  MPI_Finalized(&finished);
  if (running && !finished) MPI_Abort(MPI_COMM_WORLD, status);
  std::_Exit(status);
}

bool Work::test() {
  if (!state_ || state_->done) return true;
  int complete = 0;
  TF_MPI_CHECK("all_reduce", MPI_Testall(static_cast<int>(state_->requests.size()),
                                         state_->requests.data(), &complete, MPI_STATUSES_IGNORE));
  if (complete) state_->finish();
  return complete != 0;
}

void Work::wait() {
  if (!state_ || state_->done) return;
  const Watchdog::Scope watched(watchdog(), "all_reduce");
  TF_MPI_CHECK("all_reduce", MPI_Waitall(static_cast<int>(state_->requests.size()),
                                         state_->requests.data(), MPI_STATUSES_IGNORE));
  state_->finish();
}

void barrier() {
  ProcessState& s = require_init("barrier");
  const Watchdog::Scope watched(watchdog(), "barrier");
  TF_MPI_CHECK("barrier", MPI_Barrier(s.comm));
}

void broadcast(const Tensor& t, int root) {
  ProcessState& s = require_init("broadcast");
  TF_CHECK(t.defined(), "broadcast: expected a defined tensor, got an undefined one");
  TF_CHECK(root >= 0 && root < s.size, "broadcast: expected a root rank in [0, ", s.size, "), got ",
           root);
  Tensor buffer = t.is_contiguous() ? t : raw::contiguous(t);
  const Watchdog::Scope watched(watchdog(), "broadcast");
  if (t.device().is_cuda()) {
    device_communicator(s, t.device()).broadcast(buffer, root);
  } else {
    // A broadcast moves bytes: every dtype goes as MPI_BYTE, in pieces an int can count.
    auto* data = static_cast<char*>(buffer.data_ptr());
    std::int64_t left = t.numel() * static_cast<std::int64_t>(element_size(t.dtype()));
    while (left > 0) {
      const int count = static_cast<int>(std::min<std::int64_t>(left, INT_MAX));
      TF_MPI_CHECK("broadcast", MPI_Bcast(data, count, MPI_BYTE, root, s.comm));
      data += count;
      left -= count;
    }
  }
  if (!buffer.is_same(t)) raw::copy(buffer, t);
}

Work all_reduce_async(const Tensor& t, Reduction op) {
  ProcessState& s = require_init("all_reduce");
  TF_CHECK(t.defined(), "all_reduce: expected a defined tensor, got an undefined one");
  const bool mean = op == Reduction::mean;
  TF_CHECK(!mean || is_floating(t.dtype()), "all_reduce: mean needs a floating dtype, got ",
           t.dtype(), "; use Reduction::sum");
  if (t.device().is_cuda()) {
    Tensor buffer = t.is_contiguous() ? t : raw::contiguous(t);
    device_communicator(s, t.device()).all_reduce(buffer, mean);
    if (!buffer.is_same(t)) raw::copy(buffer, t);
    return Work();
  }
  auto work = std::make_shared<Work::State>();
  work->target = t;
  work->mean = mean;
  work->world = s.size;
  // bfloat16 is summed in float32 and rounded once at the end.
  const DType reduce_dtype = t.dtype() == DType::bfloat16 ? DType::float32 : t.dtype();
  work->buffer =
      t.is_contiguous() && reduce_dtype == t.dtype() ? t : raw::to_dtype(t, reduce_dtype);
  if (!work->buffer.is_contiguous()) work->buffer = raw::contiguous(work->buffer);
  const MPI_Datatype type = mpi_type(reduce_dtype);
  const MPI_Op mpi_op = reduce_dtype == DType::boolean ? MPI_LOR : MPI_SUM;
  auto* data = static_cast<char*>(work->buffer.data_ptr());
  const auto bytes = static_cast<std::int64_t>(element_size(reduce_dtype));
  std::int64_t left = t.numel();
  while (left > 0) {
    const int count = static_cast<int>(std::min<std::int64_t>(left, INT_MAX));
    MPI_Request request = MPI_REQUEST_NULL;
    TF_MPI_CHECK("all_reduce",
                 MPI_Iallreduce(MPI_IN_PLACE, data, count, type, mpi_op, s.comm, &request));
    work->requests.push_back(request);
    data += count * bytes;
    left -= count;
  }
  return Work(std::move(work));
}

void all_reduce(const Tensor& t, Reduction op) {
  all_reduce_async(t, op).wait();
}

std::string broadcast_string(const std::string& text, int root) {
  ProcessState& s = require_init("broadcast_string");
  TF_CHECK(root >= 0 && root < s.size, "broadcast_string: expected a root rank in [0, ", s.size,
           "), got ", root);
  const Watchdog::Scope watched(watchdog(), "broadcast_string");
  std::int64_t length = static_cast<std::int64_t>(text.size());
  TF_MPI_CHECK("broadcast_string", MPI_Bcast(&length, 1, MPI_INT64_T, root, s.comm));
  TF_CHECK(length <= INT_MAX, "broadcast_string: expected at most ", INT_MAX, " bytes, got ",
           length);
  std::string out = s.rank == root ? text : std::string(static_cast<std::size_t>(length), '\0');
  if (length > 0) {
    TF_MPI_CHECK("broadcast_string",
                 MPI_Bcast(out.data(), static_cast<int>(length), MPI_CHAR, root, s.comm));
  }
  return out;
}

namespace {
std::int64_t all_reduce_scalar(std::int64_t value, MPI_Op op, const char* name) {
  ProcessState& s = require_init(name);
  const Watchdog::Scope watched(watchdog(), name);
  std::int64_t out = 0;
  TF_MPI_CHECK(name, MPI_Allreduce(&value, &out, 1, MPI_INT64_T, op, s.comm));
  return out;
}
}  // namespace

std::int64_t all_reduce_max(std::int64_t value) {
  return all_reduce_scalar(value, MPI_MAX, "all_reduce_max");
}

std::int64_t all_reduce_min(std::int64_t value) {
  return all_reduce_scalar(value, MPI_MIN, "all_reduce_min");
}

}  // namespace tinyformer::distributed
