// col_sum on the GPU: s[m] = Σ_n x[n, m] in f32 for x [N, M]. bf16/f16/f32 x with M a multiple
// of 4 and vector-aligned rows: the column-sum kernel of kernels/common/cuda/column_sums.cuh (one
// read of x, a fixed order). Other shapes: x widened to f32 (a temporary), then sum's kernel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cast/cast.h"
#include "kernels/col_sum/col_sum.h"
#include "kernels/common/cuda/column_sums.cuh"
#include "kernels/common/cuda/vectorized.cuh"
#include "kernels/sum/sum.h"

namespace tessera {

void op::ColSum::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  const Tensor &x = in[0], &s = out[0];
  const int64_t n = x.size(0), m = x.size(1);
  if (m == 0) return;
  const cudaStream_t stream = cuda::current_stream(s);
  const bool fast = n > 0 && m % 4 == 0 && cuda::packable<4>(static_cast<const float*>(s.data_ptr()));
  const void* px = x.data_ptr();
  if (fast && x.dtype() == DType::f32 && cuda::packable<4>(static_cast<const float*>(px)))
    return cuda::column_sums<float, void>(x, nullptr, s, stream, kName);
  if (fast && x.dtype() == DType::bf16 && cuda::packable<4>(static_cast<const __nv_bfloat16*>(px)))
    return cuda::column_sums<__nv_bfloat16, void>(x, nullptr, s, stream, kName);
  if (fast && x.dtype() == DType::f16 && cuda::packable<4>(static_cast<const __half*>(px)))
    return cuda::column_sums<__half, void>(x, nullptr, s, stream, kName);
  if (x.dtype() == s.dtype()) return op::Sum::cuda({x}, {s}, op::Sum::Attrs{0, false});
  const Tensor wide = empty(x.shape(), TensorOptions(s.dtype()).device(x.device()));
  op::Cast::cuda({x}, {wide}, op::Cast::Attrs{s.dtype()});
  op::Sum::cuda({wide}, {s}, op::Sum::Attrs{0, false});
}

}  // namespace tessera
