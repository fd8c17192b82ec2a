// cross_entropy on the GPU, logits x [N, V], targets t [N] (i32):
//   loss_i = log s_i − (x[i, t_i] − m_i),  m_i = max_j x_ij, s_i = Σ_j exp(x_ij − m_i)
// with one read of each row (online max/sum in acc_t); 0 for rows with t_i == ignore_index.
// Pass 1: one block per row, threads_for(V) threads; writes y[i] (reduction none) or the row
// losses [N] in acc_t. Pass 2 (mean/sum): one block of threads_for(N, 1024) threads adds the
// row losses and counts the non-ignored rows in a fixed order: y = Σ loss (sum), Σ loss / count
// (mean; 0 when every row is ignored).
// A target outside [0, V) that is not ignore_index makes its row loss NaN and is recorded in the
// device's index-error record (core/cuda/index_errors.cuh): the CPU kernel's ValueError would need
// the targets on the host, which a GPU step must not wait for, so it comes at the next host wait.
#include "core/cuda/check.cuh"
#include "core/cuda/index_errors.cuh"
#include "kernels/common/cuda/softmax_row.cuh"
#include "kernels/cross_entropy/cross_entropy.h"

namespace tessera {

namespace {

template <class T, class Out>
__global__ void cross_entropy_rows(const T* x, const int32_t* t, Out* loss, int64_t n, int64_t v, int32_t ignore,
                                   cuda::IndexErrorRecord* err, const char* site) {
  using A = cuda::acc_t<T>;
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int32_t ti = t[i];
    A li = 0;
    if (ti != ignore) {  // the same for the whole block: every thread joins the row reduction or none does
      const cuda::MaxSumExp<A> st = cuda::row_max_sumexp(x + i * v, v);
      const bool ok = ti >= 0 && ti < v;
      li = ok ? cuda::dev_log(st.s) - (cuda::to_acc(x[i * v + ti]) - st.m) : A(NAN);
      if (!ok && threadIdx.x == 0) cuda::report_bad_index(err, site, cuda::kBadTarget, ti, i, v);
    }
    if (threadIdx.x == 0) loss[i] = cuda::from_acc<Out>(li);
  }
}

template <class T>
__global__ void cross_entropy_total(const cuda::acc_t<T>* loss, const int32_t* t, T* y, int64_t n, int32_t ignore,
                                    bool mean) {
  using A = cuda::acc_t<T>;
  A s = 0;
  int count = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    s += loss[i];
    count += t[i] != ignore;
  }
  s = cuda::block_sum(s);
  count = cuda::block_sum(count);
  if (threadIdx.x == 0) y[0] = cuda::from_acc<T>(mean ? (count > 0 ? s / A(count) : A(0)) : s);
}

}  // namespace

void op::CrossEntropy::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const int64_t n = in[0].shape()[0], v = in[0].shape()[1];
  const cudaStream_t stream = cuda::current_stream(out[0]);
  const int32_t* t = static_cast<const int32_t*>(in[1].data_ptr());
  cuda::IndexErrorRecord* err = cuda::index_error_record(out[0].device().index);
  cuda::dispatch_cuda_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = cuda::acc_t<T>;
    const T* x = static_cast<const T*>(in[0].data_ptr());
    T* y = static_cast<T*>(out[0].data_ptr());
    if (attrs.reduction == Reduction::none) {
      if (n == 0) return;
      cross_entropy_rows<<<cuda::grid_for_rows(n), cuda::threads_for(v), 0, stream>>>(x, t, y, n, v,
                                                                                   attrs.ignore_index, err, kName);
      TS_CUDA_LAUNCH_CHECK(kName);
      return;
    }
    // Row losses [N] in A (at least one element, so that N = 0 needs no special case).
    const DType acc_dtype = std::is_same_v<A, double> ? DType::f64 : DType::f32;
    Tensor rows = empty({n > 0 ? n : 1}, TensorOptions(acc_dtype).device(out[0].device()));
    A* loss = static_cast<A*>(rows.data_ptr());
    if (n > 0) {
      cross_entropy_rows<<<cuda::grid_for_rows(n), cuda::threads_for(v), 0, stream>>>(x, t, loss, n, v,
                                                                                   attrs.ignore_index, err, kName);
      TS_CUDA_LAUNCH_CHECK(kName);
    }
    cross_entropy_total<<<1, cuda::threads_for(n, 1024), 0, stream>>>(loss, t, y, n, attrs.ignore_index,
                                                                     attrs.reduction == Reduction::mean);
    TS_CUDA_LAUNCH_CHECK(kName);
  });
}

}  // namespace tessera
