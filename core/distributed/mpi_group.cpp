// The MPI process group (see mpi_group.h).
#include "core/distributed/mpi_group.h"

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "core/distributed/nccl_group.h"
#include "core/distributed/world.h"
#include "core/error.h"

namespace tessera {
namespace dist {
namespace {

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  TS_THROW(IOError, "MPI: " << call << " failed: " << std::string(text, static_cast<size_t>(len)));
}

/// Waits for `request` at most `seconds`; past that, one line on stderr and MPI_Abort of every rank.
/// A non-blocking collective progresses only inside MPI calls on every rank, so the first 20 ms
/// poll MPI_Test back to back (yielding the core between polls, for ranks that share cores); only
/// a longer wait sleeps 50 us between polls (sleeping from the start made each collective round
/// cost a timer tick: a 2-rank CPU step took twice as long).
void wait_or_abort(MPI_Request& request, const char* call, int rank, double seconds) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration<double>(seconds);
  const auto busy_until = start + std::chrono::milliseconds(20);
  for (;;) {
    int done = 0;
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), call);
    if (done) return;
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "tessera: rank %d: %s waited %.0f s for the other ranks (TESSERA_DIST_TIMEOUT_S); aborting every rank\n",
                   rank, call, seconds);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
    if (std::chrono::steady_clock::now() < busy_until) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

MPI_Datatype mpi_type(const Tensor& t, const char* call) {
  TS_CHECK(t.defined(), ValueError, call << ": an undefined tensor");
  TS_CHECK(t.device().is_cpu(), DeviceError,
           call << ": the MPI group reduces CPU tensors; got one on " << t.device()
                << " (CUDA tensors need the NCCL group, not built yet)");
  switch (t.dtype()) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    default: break;
  }
  TS_THROW(DTypeError, call << ": the MPI group takes f32 or f64 tensors; got " << t.dtype());
}

/// Finalizes MPI at exit when this library initialized it.
void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

class MpiGroup : public ProcessGroup {
 public:
  MpiGroup() : timeout_(timeout_seconds()) {
    int initialized = 0;
    check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
    if (!initialized) {
      int provided = 0;
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      std::atexit(finalize_at_exit);
    }
    check_mpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
    const WorldInfo w = detect_world();
    TS_CHECK(w.launcher == "none" || (w.rank == rank_ && w.size == size_), ValueError,
             "distributed: the " << w.launcher << " environment says rank " << w.rank << " of " << w.size
                                 << ", MPI says rank " << rank_ << " of " << size_ << " (two launchers mixed?)");
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  void all_reduce(Tensor& t, ReduceOp op) override {
    const MPI_Datatype type = mpi_type(t, "all_reduce");
    TS_CHECK(t.numel() <= INT32_MAX, ShapeError, "all_reduce: " << t.numel() << " elements exceed MPI's int count");
    const int count = static_cast<int>(t.numel());
    void* data = t.data_ptr();
    MPI_Request request;
    check_mpi(MPI_Ireduce(rank_ == 0 ? MPI_IN_PLACE : data, rank_ == 0 ? data : nullptr, count, type, MPI_SUM, 0,
                          MPI_COMM_WORLD, &request),
              "MPI_Ireduce");
    wait_or_abort(request, "all_reduce (MPI_Ireduce)", rank_, timeout_);
    if (op == ReduceOp::average && rank_ == 0) {
      if (t.dtype() == DType::f32) {
        float* v = static_cast<float*>(data);
        const float s = 1.0f / static_cast<float>(size_);
        for (int i = 0; i < count; ++i) v[i] *= s;
      } else {
        double* v = static_cast<double*>(data);
        const double s = 1.0 / static_cast<double>(size_);
        for (int i = 0; i < count; ++i) v[i] *= s;
      }
    }
    check_mpi(MPI_Ibcast(data, count, type, 0, MPI_COMM_WORLD, &request), "MPI_Ibcast");
    wait_or_abort(request, "all_reduce (MPI_Ibcast)", rank_, timeout_);
  }

  void broadcast(Tensor& t, int root) override {
    const MPI_Datatype type = mpi_type(t, "broadcast");
    TS_CHECK(root >= 0 && root < size_, ValueError, "broadcast: root " << root << " of " << size_ << " ranks");
    TS_CHECK(t.numel() <= INT32_MAX, ShapeError, "broadcast: " << t.numel() << " elements exceed MPI's int count");
    MPI_Request request;
    check_mpi(MPI_Ibcast(t.data_ptr(), static_cast<int>(t.numel()), type, root, MPI_COMM_WORLD, &request),
              "MPI_Ibcast");
    wait_or_abort(request, "broadcast (MPI_Ibcast)", rank_, timeout_);
  }

  void barrier() override {
    MPI_Request request;
    check_mpi(MPI_Ibarrier(MPI_COMM_WORLD, &request), "MPI_Ibarrier");
    wait_or_abort(request, "barrier (MPI_Ibarrier)", rank_, timeout_);
  }

 private:
  int rank_ = 0, size_ = 1;
  double timeout_;
};

}  // namespace

std::shared_ptr<ProcessGroup> mpi_process_group() { return std::make_shared<MpiGroup>(); }

std::shared_ptr<ProcessGroup> nccl_process_group_over_mpi(int device) {
  const std::shared_ptr<ProcessGroup> mpi = mpi_process_group();
  WorldInfo world = detect_world();
  world.rank = mpi->rank();
  world.size = mpi->size();
  NcclId id;
  if (world.rank == 0) id = nccl_new_id();
  // the id's 128 bytes as 32 floats: a broadcast moves bits, it computes nothing
  Tensor bytes = empty({32}, TensorOptions(DType::f32));
  std::memcpy(bytes.data_ptr(), id.bytes.data(), id.bytes.size());
  mpi->broadcast(bytes, 0);
  std::memcpy(id.bytes.data(), bytes.data_ptr(), id.bytes.size());
  return nccl_process_group(world, id, device);
}

InitOptions with_mpi(InitOptions options) {
  options.mpi_group = [] { return mpi_process_group(); };
  options.nccl_group_over_mpi = [](int device) { return nccl_process_group_over_mpi(device); };
  return options;
}

}  // namespace dist
}  // namespace tessera
