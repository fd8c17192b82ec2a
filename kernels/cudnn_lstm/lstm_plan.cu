// cuDNN LSTM plans and the weight-space packing kernels (see lstm_plan.h). Compiled only with
// cuDNN (TESSERA_HAVE_CUDNN).
#ifdef TESSERA_HAVE_CUDNN

#include "kernels/cudnn_lstm/lstm_plan.h"

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "core/cuda/check.cuh"
#include "kernels/common/cuda/blas.h"
#include "kernels/common/cuda/dnn.h"
#include "kernels/common/cuda/dtype.cuh"

namespace tessera {
namespace cuda {

namespace {

cudnnDataType_t dnn_type(DType t) {
  switch (t) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f64: return CUDNN_DATA_DOUBLE;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    case DType::f16: return CUDNN_DATA_HALF;
    default: break;
  }
  TS_THROW(DTypeError, "cudnn_lstm: no cuDNN data type for " << t);
}

std::unique_ptr<LstmPlan> make_plan(int device, DType dtype, const detail::LstmDims& d, bool tf32) {
  cudnnHandle_t h = dnn_handle(device);
  auto p = std::make_unique<LstmPlan>();
  p->dtype = dtype;
  p->dims = d;
  const int T = static_cast<int>(d.steps), B = static_cast<int>(d.batch), In = static_cast<int>(d.in),
            H = static_cast<int>(d.hidden);
  // Storage in the tensors' dtype; math in f32 for f32/bf16/f16 (f64 for f64). f32: plain FMA
  // unless TF32 is allowed (CUDNN_DEFAULT_MATH then lets cuDNN use TF32 tensor cores); f16:
  // tensor cores; bf16: cuDNN's default (tensor cores), f32 accumulation in both. The same
  // choices as PyTorch's cuDNN RNNs with TF32 allowed.
  const cudnnDataType_t data = dnn_type(dtype);
  const cudnnDataType_t math_prec = dtype == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  const cudnnMathType_t math = dtype == DType::f32   ? (tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH)
                               : dtype == DType::f16 ? CUDNN_TENSOR_OP_MATH
                                                     : CUDNN_DEFAULT_MATH;
  TS_CUDNN_CHECK(cudnnCreateDropoutDescriptor(&p->dropout));
  TS_CUDNN_CHECK(cudnnSetDropoutDescriptor(p->dropout, h, 0.0f, nullptr, 0, 0));
  TS_CUDNN_CHECK(cudnnCreateRNNDescriptor(&p->rnn));
  // projSize = H: no recurrent projection (cuDNN 9 rejects 0). Padded IO: the unpacked
  // (time-major [T, B, .]) data layout needs it.
  TS_CUDNN_CHECK(cudnnSetRNNDescriptor_v8(p->rnn, CUDNN_RNN_ALGO_STANDARD, CUDNN_LSTM, CUDNN_RNN_DOUBLE_BIAS,
                                          CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, data, math_prec, math, In, H,
                                          H, 1, p->dropout, CUDNN_RNN_PADDED_IO_ENABLED));
  const std::vector<int> lengths(static_cast<size_t>(B), T);
  TS_CUDNN_CHECK(cudnnCreateRNNDataDescriptor(&p->x));
  TS_CUDNN_CHECK(cudnnSetRNNDataDescriptor(p->x, data, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, T, B, In,
                                           lengths.data(), nullptr));
  TS_CUDNN_CHECK(cudnnCreateRNNDataDescriptor(&p->y));
  TS_CUDNN_CHECK(cudnnSetRNNDataDescriptor(p->y, data, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, T, B, H,
                                           lengths.data(), nullptr));
  const int dims[3] = {1, B, H}, strides[3] = {B * H, H, 1};
  TS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->state));
  TS_CUDNN_CHECK(cudnnSetTensorNdDescriptor(p->state, data, 3, dims, strides));
  TS_CUDNN_CHECK(cudnnGetRNNWeightSpaceSize(h, p->rnn, &p->weight_bytes));
  TS_CUDNN_CHECK(cudnnGetRNNTempSpaceSizes(h, p->rnn, CUDNN_FWD_MODE_TRAINING, p->x, &p->work_bytes,
                                           &p->reserve_bytes));
  return p;
}

// Checks that a piece cuDNN reports is a packed [rows, cols] (or [cols]) block; returns its size.
int64_t checked_piece(cudnnTensorDescriptor_t desc, int64_t rows, int64_t cols, const char* what, int id) {
  cudnnDataType_t dt;
  int nb = 0, dims[8] = {0}, strides[8] = {0};
  TS_CUDNN_CHECK(cudnnGetTensorNdDescriptor(desc, 8, &dt, &nb, dims, strides));
  int64_t n = 1;
  for (int i = 0; i < nb; ++i) n *= dims[i];
  const bool ok = nb >= 1 && n == rows * cols && dims[nb - 1] == cols && strides[nb - 1] == 1 &&
                  (nb < 2 || cols == 1 || strides[nb - 2] == cols);
  TS_CHECK(ok, DeviceError,
           "cudnn_lstm: cuDNN's " << what << " " << id << " is not a packed [" << rows << ", " << cols
                                  << "] block (rank " << nb << ", last dim " << (nb ? dims[nb - 1] : 0) << ")");
  return n;
}

}  // namespace

const LstmWeightOffsets& LstmPlan::offsets(cudnnHandle_t handle, void* space) const {
  std::call_once(offsets_once_, [&] {
    const int64_t H = dims.hidden, In = dims.in, elem = static_cast<int64_t>(dtype_size(dtype));
    cudnnTensorDescriptor_t m = nullptr, b = nullptr;
    TS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&m));
    TS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&b));
    int64_t covered = 0;
    // linLayerID 0-3: the input matrices/biases of gates i, f, g, o; 4-7: the recurrent ones.
    for (int id = 0; id < 8; ++id) {
      void *ma = nullptr, *ba = nullptr;
      TS_CUDNN_CHECK(cudnnGetRNNWeightParams(handle, rnn, 0, weight_bytes, space, id, m, &ma, b, &ba));
      covered += checked_piece(m, H, id < 4 ? In : H, "matrix", id) + checked_piece(b, H, 1, "bias", id);
      const int64_t wo = (static_cast<char*>(ma) - static_cast<char*>(space)) / elem;
      const int64_t bo = (static_cast<char*>(ba) - static_cast<char*>(space)) / elem;
      (id < 4 ? offsets_.w_in : offsets_.w_rec)[id % 4] = wo;
      (id < 4 ? offsets_.b_in : offsets_.b_rec)[id % 4] = bo;
    }
    cudnnDestroyTensorDescriptor(m);
    cudnnDestroyTensorDescriptor(b);
    offsets_.covers_space = covered * elem == static_cast<int64_t>(weight_bytes);
  });
  return offsets_;
}

const LstmPlan& lstm_plan(int device, DType dtype, const detail::LstmDims& d) {
  const bool tf32 = dtype == DType::f32 && allow_tf32();
  using Key = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, bool>;
  static std::mutex mutex;
  static std::map<Key, std::unique_ptr<LstmPlan>> plans;  // kept for the process's life
  const Key key{device, static_cast<int>(dtype), d.steps, d.batch, d.in, d.hidden, tf32};
  std::lock_guard<std::mutex> lock(mutex);
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, make_plan(device, dtype, d, tf32)).first;
  return *it->second;
}

// ---- packing kernels -------------------------------------------------------------------------

namespace {

struct Offsets4 {
  int64_t v[4];
};

Offsets4 to4(const std::array<int64_t, 4>& a) { return {{a[0], a[1], a[2], a[3]}}; }

// tessera's gate (i, f, o, u) = 0..3 of cuDNN's gate g in (i, f, g, o).
__host__ __device__ inline int tessera_gate(int g) { return g < 2 ? g : 5 - g; }

constexpr int kTile = 32, kRowsPerPass = 8;

// dst[dst_off[g] + c·dst_ld + r] = src[src_off[g] + r·src_ld + c] for r < rows, c < cols, gate
// g = blockIdx.z: four strided [rows, cols] matrices transposed at once. Tiles of 32×32 through
// shared memory (padded column: no bank conflicts); threads (32, 8), each moves 4 elements, reads
// and writes both along rows. U is an unsigned type of the element's size (a copy moves bits).
template <class U>
__global__ void transpose_gates_kernel(const U* src, U* dst, int64_t rows, int64_t cols, int64_t src_ld,
                                       int64_t dst_ld, Offsets4 src_off, Offsets4 dst_off) {
  __shared__ U tile[kTile][kTile + 1];
  const int g = blockIdx.z;
  const int64_t r0 = int64_t{blockIdx.y} * kTile, c0 = int64_t{blockIdx.x} * kTile;
  for (int i = threadIdx.y; i < kTile; i += kRowsPerPass) {
    const int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[i][threadIdx.x] = src[src_off.v[g] + r * src_ld + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < kTile; i += kRowsPerPass) {
    const int64_t c = c0 + i, r = r0 + threadIdx.x;
    if (r < rows && c < cols) dst[dst_off.v[g] + c * dst_ld + r] = tile[threadIdx.x][i];
  }
}

template <class U>
void transpose_gates(const void* src, void* dst, int64_t rows, int64_t cols, int64_t src_ld, int64_t dst_ld,
                     Offsets4 src_off, Offsets4 dst_off, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile), static_cast<unsigned>((rows + kTile - 1) / kTile),
                  4);
  TS_CHECK(grid.y <= 65535, ShapeError, "cudnn_lstm: " << rows << " weight rows exceed the packing grid");
  transpose_gates_kernel<U><<<grid, dim3(kTile, kRowsPerPass), 0, stream>>>(
      static_cast<const U*>(src), static_cast<U*>(dst), rows, cols, src_ld, dst_ld, src_off, dst_off);
  TS_CUDA_LAUNCH_CHECK("cudnn_lstm (weight packing)");
}

// The same with U picked from the element size.
void transpose_gates_bytes(size_t elem, const void* src, void* dst, int64_t rows, int64_t cols, int64_t src_ld,
                           int64_t dst_ld, Offsets4 src_off, Offsets4 dst_off, cudaStream_t s) {
  switch (elem) {
    case 2: return transpose_gates<uint16_t>(src, dst, rows, cols, src_ld, dst_ld, src_off, dst_off, s);
    case 4: return transpose_gates<uint32_t>(src, dst, rows, cols, src_ld, dst_ld, src_off, dst_off, s);
    default: return transpose_gates<uint64_t>(src, dst, rows, cols, src_ld, dst_ld, src_off, dst_off, s);
  }
}

// One thread per (cuDNN gate g, unit j) of 4H: input bias of g = bias[G(g)·H + j]; recurrent
// bias = forget_bias on the forget gate (g = 1), else 0.
template <class T>
__global__ void pack_bias_kernel(const T* bias, T* space, Offsets4 b_in, Offsets4 b_rec, int64_t hs,
                                 double forget_bias) {
  using A = acc_t<T>;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < 4 * hs; k += int64_t{gridDim.x} * blockDim.x) {
    const int g = static_cast<int>(k / hs);
    const int64_t j = k % hs;
    space[b_in.v[g] + j] = bias[tessera_gate(g) * hs + j];
    space[b_rec.v[g] + j] = from_acc<T>(static_cast<A>(g == 1 ? forget_bias : 0.0));
  }
}

// dbias[G(g)·H + j] = the input-bias gradient of (g, j) (U: the element's bits).
template <class U>
__global__ void unpack_bias_kernel(const U* dspace, U* dbias, Offsets4 b_in, int64_t hs) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < 4 * hs; k += int64_t{gridDim.x} * blockDim.x) {
    const int g = static_cast<int>(k / hs);
    const int64_t j = k % hs;
    dbias[tessera_gate(g) * hs + j] = dspace[b_in.v[g] + j];
  }
}

__global__ void fill_lengths_kernel(int32_t* lengths, int64_t n, int32_t steps) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    lengths[i] = steps;
}

// Column offsets G(g)·H of cuDNN's gates inside tessera's [., 4H] weights.
Offsets4 tessera_columns(int64_t hs) {
  Offsets4 o;
  for (int g = 0; g < 4; ++g) o.v[g] = tessera_gate(g) * hs;
  return o;
}

}  // namespace

Tensor seq_lengths(const LstmPlan& plan, Device device) {
  Tensor lengths = empty({plan.dims.batch}, TensorOptions(DType::i32).device(device));
  fill_lengths_kernel<<<blocks_for(plan.dims.batch), 256, 0, current_stream(lengths)>>>(
      static_cast<int32_t*>(lengths.data_ptr()), plan.dims.batch, static_cast<int32_t>(plan.dims.steps));
  TS_CUDA_LAUNCH_CHECK("cudnn_lstm (sequence lengths)");
  return lengths;
}

void pack_lstm_weights(const LstmPlan& plan, const Tensor& wx, const Tensor& wh, const Tensor& bias,
                       double forget_bias, const Tensor& space) {
  const int64_t H = plan.dims.hidden, In = plan.dims.in;
  const size_t elem = dtype_size(plan.dtype);
  cudaStream_t s = current_stream(space);
  const LstmWeightOffsets& o = plan.offsets(dnn_handle(space.device().index), space.data_ptr());
  if (!o.covers_space) TS_CUDA_CHECK(cudaMemsetAsync(space.data_ptr(), 0, space.nbytes(), s));
  // W_g [H, In] = (wx[:, G(g)·H : G(g)·H + H])ᵀ, R_g [H, H] likewise from wh.
  transpose_gates_bytes(elem, wx.data_ptr(), space.data_ptr(), In, H, 4 * H, In, tessera_columns(H), to4(o.w_in), s);
  transpose_gates_bytes(elem, wh.data_ptr(), space.data_ptr(), H, H, 4 * H, H, tessera_columns(H), to4(o.w_rec), s);
  dispatch_cuda_float(plan.dtype, "cudnn_lstm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    pack_bias_kernel<T><<<blocks_for(4 * H), 256, 0, s>>>(static_cast<const T*>(bias.data_ptr()),
                                                          static_cast<T*>(space.data_ptr()), to4(o.b_in),
                                                          to4(o.b_rec), H, forget_bias);
  });
  TS_CUDA_LAUNCH_CHECK("cudnn_lstm (bias packing)");
}

void unpack_lstm_grads(const LstmPlan& plan, const Tensor& dspace, const Tensor& dwx, const Tensor& dwh,
                       const Tensor& dbias) {
  const int64_t H = plan.dims.hidden, In = plan.dims.in;
  const size_t elem = dtype_size(plan.dtype);
  cudaStream_t s = current_stream(dspace);
  const LstmWeightOffsets& o = plan.offsets(dnn_handle(dspace.device().index), dspace.data_ptr());
  // dwx[:, G(g)·H + j] = (dW_g [H, In])ᵀ, dwh likewise from dR_g.
  transpose_gates_bytes(elem, dspace.data_ptr(), dwx.data_ptr(), H, In, In, 4 * H, to4(o.w_in), tessera_columns(H), s);
  transpose_gates_bytes(elem, dspace.data_ptr(), dwh.data_ptr(), H, H, H, 4 * H, to4(o.w_rec), tessera_columns(H), s);
  auto launch_bias = [&](auto zero) {
    using U = decltype(zero);
    unpack_bias_kernel<U><<<blocks_for(4 * H), 256, 0, s>>>(static_cast<const U*>(dspace.data_ptr()),
                                                            static_cast<U*>(dbias.data_ptr()), to4(o.b_in), H);
  };
  if (elem == 2) launch_bias(uint16_t{0});
  else if (elem == 4) launch_bias(uint32_t{0});
  else launch_bias(uint64_t{0});
  TS_CUDA_LAUNCH_CHECK("cudnn_lstm_backward (bias unpacking)");
}

}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_HAVE_CUDNN
