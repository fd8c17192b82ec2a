// The NCCL process group (see nccl_group.h). Compiled with TESSERA_HAVE_NCCL in CUDA builds that
// found NCCL; otherwise its functions raise NotImplementedError.
#include "core/distributed/nccl_group.h"

#include <cstdio>

#include "core/error.h"

#ifdef TESSERA_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda/progress.h"
#include "core/cuda/runtime.h"
#endif

namespace tessera {
namespace dist {

#ifdef TESSERA_HAVE_NCCL
namespace {

#define TS_NCCL_CHECK(expr, what)                                                                           \
  do {                                                                                                      \
    const ncclResult_t rc_ = (expr);                                                                        \
    if (rc_ != ncclSuccess) {                                                                               \
      const char* last_ = ncclGetLastError(nullptr);                                                        \
      TS_THROW(DeviceError, "NCCL: " << what << " failed: " << ncclGetErrorString(rc_)                     \
                                     << (last_ && *last_ ? std::string(" (") + last_ + ")" : std::string())); \
    }                                                                                                       \
  } while (0)

#define TS_CUDA_RT_CHECK(expr)                                                                        \
  do {                                                                                                \
    const cudaError_t e_ = (expr);                                                                    \
    TS_CHECK(e_ == cudaSuccess, DeviceError, "CUDA: " << #expr << " failed: " << cudaGetErrorString(e_)); \
  } while (0)

ncclDataType_t nccl_type(const Tensor& t, const char* call) {
  switch (t.dtype()) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    default: break;
  }
  TS_THROW(DTypeError, call << ": the NCCL group takes f32, f64, bf16 or f16 tensors; got " << t.dtype());
}

/// Runs `fn` (NCCL's communicator init, which cannot be interrupted); when it has not returned
/// after `seconds`, prints one line and ends the process (status 3), so that a rank whose peers
/// never come does not hang.
template <class Fn>
void with_deadline(double seconds, int rank, const char* what, Fn fn) {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(m);
    if (!cv.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return done; })) {
      std::fprintf(stderr, "tessera: rank %d: %s waited %.0f s for the other ranks (TESSERA_DIST_TIMEOUT_S); exiting\n",
                   rank, what, seconds);
      std::fflush(stderr);
      std::_Exit(3);
    }
  });
  try {
    fn();
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(m);
      done = true;
    }
    cv.notify_one();
    watchdog.join();
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(m);
    done = true;
  }
  cv.notify_one();
  watchdog.join();
}

class NcclGroup final : public ProcessGroup {
 public:
  NcclGroup(const WorldInfo& world, const NcclId& id, int device, const std::string& rendezvous)
      : rank_(world.rank), size_(world.size), device_(device) {
    TS_CHECK(device >= 0 && device < cuda_device_count(), DeviceError,
             "NCCL group: rank " << rank_ << " asks for GPU " << device << ", this node has " << cuda_device_count());
    cuda::set_device(device_);
    ncclUniqueId uid;
    static_assert(sizeof(uid.internal) == sizeof(id.bytes), "ncclUniqueId is 128 bytes");
    std::copy(id.bytes.begin(), id.bytes.end(), uid.internal);
    with_deadline(timeout_seconds(), rank_, "joining the NCCL group", [&] {
      TS_NCCL_CHECK(ncclCommInitRank(&comm_, size_, uid, rank_), "ncclCommInitRank");
    });
    TS_CUDA_RT_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
    scratch_ticket_ = reserve_tickets(1);
    barrier();  // every rank has joined: the rendezvous file has served
    if (rank_ == 0 && !rendezvous.empty()) std::remove(rendezvous.c_str());
    cuda::track_progress(device_, true);
    watchdog_ = std::thread([this] { watch(); });
  }
  ~NcclGroup() override {
    {
      std::lock_guard<std::mutex> lock(watch_mutex_);
      stop_ = true;
    }
    watch_cv_.notify_one();
    if (watchdog_.joinable()) watchdog_.join();
    cuda::track_progress(device_, false);
    cudaSetDevice(device_);
    cudaDeviceSynchronize();
    for (Ticket& t : tickets_) {
      if (t.ready) cudaEventDestroy(t.ready);
      if (t.done) cudaEventDestroy(t.done);
    }
    if (side_) cudaStreamDestroy(side_);
    if (comm_) ncclCommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  Device device() const override { return Device::cuda(device_); }

  void start_all_reduce(const Tensor& in, const Tensor& out, bool average, int ticket) override {
    begin(in, out, ticket, "all_reduce");
    TS_NCCL_CHECK(ncclAllReduce(out.data_ptr(), out.data_ptr(), static_cast<size_t>(out.numel()),
                                nccl_type(out, "all_reduce"), average ? ncclAvg : ncclSum, comm_, side_),
                  "ncclAllReduce");
    end(out, ticket);
  }

  // One ncclReduce per segment to its root, grouped (the segments of one bucket go out together).
  void start_reduce(const Tensor& in, const Tensor& out, const std::vector<Segment>& segments, bool average,
                    int ticket) override {
    check_segments(out, segments, "reduce");
    begin(in, out, ticket, "reduce");
    const ncclDataType_t type = nccl_type(out, "reduce");
    char* base = static_cast<char*>(out.data_ptr());
    const size_t e = dtype_size(out.dtype());
    TS_NCCL_CHECK(ncclGroupStart(), "ncclGroupStart");
    for (const Segment& g : segments) {
      void* p = base + static_cast<size_t>(g.offset) * e;
      TS_NCCL_CHECK(ncclReduce(p, p, static_cast<size_t>(g.count), type, average ? ncclAvg : ncclSum, g.root, comm_, side_),
                    "ncclReduce");
    }
    TS_NCCL_CHECK(ncclGroupEnd(), "ncclGroupEnd");
    end(out, ticket);
  }

  // One ncclBroadcast per segment from its root, grouped.
  void start_broadcast(const Tensor& in, const Tensor& out, const std::vector<Segment>& segments, int ticket) override {
    check_segments(out, segments, "broadcast");
    begin(in, out, ticket, "broadcast");
    const ncclDataType_t type = nccl_type(out, "broadcast");
    char* base = static_cast<char*>(out.data_ptr());
    const size_t e = dtype_size(out.dtype());
    TS_NCCL_CHECK(ncclGroupStart(), "ncclGroupStart");
    for (const Segment& g : segments) {
      void* p = base + static_cast<size_t>(g.offset) * e;
      TS_NCCL_CHECK(ncclBroadcast(p, p, static_cast<size_t>(g.count), type, g.root, comm_, side_), "ncclBroadcast");
    }
    TS_NCCL_CHECK(ncclGroupEnd(), "ncclGroupEnd");
    end(out, ticket);
  }

  void join(int ticket) override {
    TS_CHECK(ticket >= 0 && static_cast<size_t>(ticket) < tickets_.size() && tickets_[ticket].busy, ValueError,
             "collective_wait: ticket " << ticket << " has no all-reduce in flight");
    Ticket& t = tickets_[ticket];
    TS_CUDA_RT_CHECK(cudaStreamWaitEvent(stream(), t.done, 0));
    t.held = Tensor();  // freed in the device stream's order, after the wait
    t.busy = false;
  }

  void all_reduce(Tensor& t, ReduceOp op) override {
    start_all_reduce(t, t, op == ReduceOp::average, scratch_ticket_);
    join(scratch_ticket_);
  }

  void broadcast(Tensor& t, int root) override {
    check(t, "broadcast");
    TS_CHECK(root >= 0 && root < size_, ValueError, "broadcast: root " << root << " of " << size_ << " ranks");
    TS_NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.nbytes(), ncclUint8, root, comm_, stream()), "ncclBroadcast");
  }

  void barrier() override {
    Tensor one = ones({1}, TensorOptions(DType::f32).device(Device::cuda(device_)));
    all_reduce(one, ReduceOp::sum);
    cuda::synchronize(device_);
  }

 private:
  struct Ticket {
    cudaEvent_t ready = nullptr, done = nullptr;
    Tensor held;  // the output, alive until the join
    bool busy = false;
  };

  cudaStream_t stream() const { return static_cast<cudaStream_t>(cuda::stream(device_)); }

  // The start of an asynchronous collective on ticket `ticket`: out = in (a copy on the device's
  // stream unless the same buffer), then the group's stream waits for the device's.
  void begin(const Tensor& in, const Tensor& out, int ticket, const char* call) {
    check(in, call);
    check(out, call);
    TS_CHECK(in.meta() == out.meta(), ShapeError, call << ": input " << in.meta() << " and output " << out.meta() << " differ");
    TS_CHECK(ticket >= 0, ValueError, call << ": ticket " << ticket << " is negative");
    Ticket& t = slot(ticket);
    TS_CHECK(!t.busy, ValueError, call << ": ticket " << ticket << " is still in flight (join it first)");
    cudaStream_t s = stream();
    if (out.data_ptr() != in.data_ptr())
      TS_CUDA_RT_CHECK(cudaMemcpyAsync(out.data_ptr(), in.data_ptr(), in.nbytes(), cudaMemcpyDeviceToDevice, s));
    TS_CUDA_RT_CHECK(cudaEventRecord(t.ready, s));
    TS_CUDA_RT_CHECK(cudaStreamWaitEvent(side_, t.ready, 0));
  }
  // Its end: the done event join() waits on, the watchdog's marker, `out` held until the join.
  void end(const Tensor& out, int ticket) {
    Ticket& t = tickets_[ticket];
    TS_CUDA_RT_CHECK(cudaEventRecord(t.done, side_));
    cuda::mark_progress(device_, side_);  // the watchdog's marker (graph launches are marked by the runtime)
    t.held = out;
    t.busy = true;
  }
  void check_segments(const Tensor& t, const std::vector<Segment>& segments, const char* call) const {
    for (const Segment& g : segments)
      TS_CHECK(g.offset >= 0 && g.count >= 0 && g.offset + g.count <= t.numel() && g.root >= 0 && g.root < size_,
               ValueError, call << ": segment [" << g.offset << ", " << g.offset + g.count << ") of " << t.numel()
                                << " elements, root " << g.root << " of " << size_ << " ranks");
  }

  // The watchdog (a thread of the group's lifetime): once a second, an asynchronous NCCL error
  // (a peer's connection lost) or a device that has completed none of its work markers for
  // TESSERA_DIST_TIMEOUT_S seconds while some are pending (a collective whose peer died or hangs
  // never completes, nor does what is queued behind it) ends the process with one line (status 3)
  // instead of hanging. The other ranks' watchdogs end them the same way.
  void watch() {
    cudaSetDevice(device_);
    std::unique_lock<std::mutex> lock(watch_mutex_);
    while (!watch_cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_; })) {
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress)
        fatal(std::string("NCCL reported an error: ") + ncclGetErrorString(async));
      const double stalled = cuda::seconds_without_progress(device_);
      if (stalled > timeout_)
        fatal("the GPU completed no work for " + std::to_string(static_cast<long>(stalled)) +
              " s with a collective in flight (TESSERA_DIST_TIMEOUT_S); a rank died or hangs");
    }
  }
  [[noreturn]] void fatal(const std::string& why) const {
    std::fprintf(stderr, "tessera: rank %d of %d (NCCL): %s; exiting\n", rank_, size_, why.c_str());
    std::fflush(stderr);
    std::_Exit(3);
  }

  void check(const Tensor& t, const char* call) const {
    TS_CHECK(t.defined(), ValueError, call << ": an undefined tensor");
    TS_CHECK(t.device() == Device::cuda(device_), DeviceError,
             call << ": the NCCL group of rank " << rank_ << " reduces tensors on " << Device::cuda(device_) << "; got one on "
                  << t.device() << (t.device().is_cpu() ? " (CPU tensors need the MPI group)" : ""));
    nccl_type(t, call);
  }

  Ticket& slot(int ticket) {
    while (tickets_.size() <= static_cast<size_t>(ticket)) {
      Ticket t;
      TS_CUDA_RT_CHECK(cudaEventCreateWithFlags(&t.ready, cudaEventDisableTiming));
      TS_CUDA_RT_CHECK(cudaEventCreateWithFlags(&t.done, cudaEventDisableTiming));
      tickets_.push_back(std::move(t));
    }
    return tickets_[ticket];
  }

  int rank_, size_, device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t side_ = nullptr;
  int scratch_ticket_ = 0;
  std::vector<Ticket> tickets_;
  double timeout_ = timeout_seconds();
  std::thread watchdog_;
  std::mutex watch_mutex_;
  std::condition_variable watch_cv_;
  bool stop_ = false;
};

}  // namespace

NcclId nccl_new_id() {
  ncclUniqueId uid;
  TS_NCCL_CHECK(ncclGetUniqueId(&uid), "ncclGetUniqueId");
  NcclId id;
  std::copy(uid.internal, uid.internal + sizeof(uid.internal), id.bytes.begin());
  return id;
}

std::shared_ptr<ProcessGroup> nccl_process_group(const WorldInfo& world, const NcclId& id, int device,
                                                 const std::string& rendezvous) {
  return std::make_shared<NcclGroup>(world, id, device, rendezvous);
}

#else  // no NCCL in this build

NcclId nccl_new_id() {
  TS_THROW(NotImplementedError, "NCCL: this build of tessera has no NCCL (a CUDA build that finds NCCL has it)");
}

std::shared_ptr<ProcessGroup> nccl_process_group(const WorldInfo&, const NcclId&, int, const std::string&) {
  TS_THROW(NotImplementedError, "NCCL: this build of tessera has no NCCL (a CUDA build that finds NCCL has it)");
}

#endif

NcclId rendezvous_file(const std::string& path, const WorldInfo& world) {
  return rendezvous_exchange(path, world, world.rank == 0 ? nccl_new_id() : NcclId{});
}

}  // namespace dist
}  // namespace tessera
