// cross_entropy_backward on the GPU, logits x [N, V], targets t [N] (i32), loss gradient g:
//   dx[i, j] = (p_ij − [j == t_i]) · g_row(i),  p_ij = exp(x_ij − m_i) / s_i
// with g_row = g[i] (none), g (sum), g / count (mean, count = non-ignored rows), and 0 for
// rows whose target is ignore_index.
// For mean, one block first counts the non-ignored rows (int, any order gives the same).
// Then one block per row (threads_for(V) threads): online max/sum over the row, and a second
// read writes e_j · (g_row / s), the target column as (e_t / s − 1) · g_row (as the CPU does).
// A target outside [0, V) that is not ignore_index makes its row NaN and is recorded in the
// index-error record (see cross_entropy.cu).
#include "core/cuda/check.cuh"
#include "core/cuda/index_errors.cuh"
#include "kernels/common/cuda/softmax_row.cuh"
#include "kernels/cross_entropy_backward/cross_entropy_backward.h"

namespace tessera {

namespace {

__global__ void count_targets(const int32_t* t, int64_t n, int32_t ignore, int32_t* count) {
  int c = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) c += t[i] != ignore;
  c = cuda::block_sum(c);
  if (threadIdx.x == 0) *count = c;
}

template <class T>
__global__ void cross_entropy_backward_rows(const T* x, const int32_t* t, const T* g, const int32_t* count, T* dx,
                                            int64_t n, int64_t v, int32_t ignore, Reduction reduction,
                                            cuda::IndexErrorRecord* err, const char* site) {
  using A = cuda::acc_t<T>;
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int32_t ti = t[i];
    const T* xr = x + i * v;
    T* dr = dx + i * v;
    if (ti == ignore) {
      for (int64_t j = threadIdx.x; j < v; j += blockDim.x) dr[j] = cuda::from_acc<T>(0);
      continue;
    }
    A gr;
    if (reduction == Reduction::none) {
      gr = cuda::to_acc(g[i]);
    } else if (reduction == Reduction::sum) {
      gr = cuda::to_acc(g[0]);
    } else {
      gr = cuda::to_acc(g[0]) / A(*count);  // count >= 1: this row counts
    }
    const cuda::MaxSumExp<A> st = cuda::row_max_sumexp(xr, v);
    const A scale = gr / st.s;
    const bool valid = ti >= 0 && ti < v;
    if (!valid && threadIdx.x == 0) cuda::report_bad_index(err, site, cuda::kBadTarget, ti, i, v);
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
      const A e = cuda::dev_exp(cuda::to_acc(xr[j]) - st.m);
      dr[j] = cuda::from_acc<T>(!valid ? A(NAN) : (j == ti ? (e / st.s - A(1)) * gr : e * scale));
    }
  }
}

}  // namespace

void op::CrossEntropyBackward::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const int64_t n = in[0].shape()[0], v = in[0].shape()[1];
  if (n == 0) return;
  const cudaStream_t stream = cuda::current_stream(out[0]);
  const int32_t* t = static_cast<const int32_t*>(in[1].data_ptr());
  Tensor count;  // [1] i32, mean only
  if (attrs.reduction == Reduction::mean) {
    count = empty({1}, TensorOptions(DType::i32).device(out[0].device()));
    count_targets<<<1, cuda::threads_for(n, 1024), 0, stream>>>(t, n, attrs.ignore_index,
                                                              static_cast<int32_t*>(count.data_ptr()));
    TS_CUDA_LAUNCH_CHECK(kName);
  }
  const int32_t* pcount = count.defined() ? static_cast<const int32_t*>(count.data_ptr()) : nullptr;
  cuda::dispatch_cuda_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cross_entropy_backward_rows<<<cuda::grid_for_rows(n), cuda::threads_for(v), 0, stream>>>(
        static_cast<const T*>(in[0].data_ptr()), t, static_cast<const T*>(in[2].data_ptr()), pcount,
        static_cast<T*>(out[0].data_ptr()), n, v, attrs.ignore_index, attrs.reduction,
        cuda::index_error_record(out[0].device().index), kName);
  });
  TS_CUDA_LAUNCH_CHECK(kName);
}

}  // namespace tessera
