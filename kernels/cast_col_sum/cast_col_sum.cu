// cast_col_sum on the GPU: y = cast(x, dtype) and s[m] = Σ_n x[n, m] for x [N, M] in one read
// of x (a linear layer's backward under autocast: the bf16 copy of dy for the GEMMs and the
// bias gradient).
//
// f32 x, M a multiple of 4, aligned pointers (the case that matters): the column-sum kernel of
// kernels/common/cuda/column_sums.cuh, writing y in the same read. Other dtypes or shapes: cast
// and sum's kernels.
#include <cstdint>
#include <type_traits>

#include "core/cuda/check.cuh"
#include "kernels/cast/cast.h"
#include "kernels/cast_col_sum/cast_col_sum.h"
#include "kernels/common/cuda/column_sums.cuh"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/common/cuda/vectorized.cuh"
#include "kernels/sum/sum.h"

namespace tessera {

void op::CastColSum::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor &x = in[0], &y = out[0], &s = out[1];
  const int64_t n = x.size(0), m = x.size(1);
  if (m == 0) return;
  const auto* px = static_cast<const float*>(x.data_ptr());
  const auto* ps = static_cast<const float*>(s.data_ptr());
  const bool fast = x.dtype() == DType::f32 && n > 0 && m % 4 == 0 && cuda::packable<4>(px, ps);
  void* py = y.data_ptr();
  const cudaStream_t stream = cuda::current_stream(y);
  if (fast && y.dtype() == DType::bf16 && cuda::packable<4>(static_cast<const __nv_bfloat16*>(py)))
    return cuda::column_sums<float, __nv_bfloat16>(x, py, s, stream, kName);
  if (fast && y.dtype() == DType::f16 && cuda::packable<4>(static_cast<const __half*>(py)))
    return cuda::column_sums<float, __half>(x, py, s, stream, kName);
  if (fast && y.dtype() == DType::f32 && cuda::packable<4>(static_cast<const float*>(py)))
    return cuda::column_sums<float, float>(x, py, s, stream, kName);
  // Any other case: the two ops' own kernels, one after the other.
  op::Cast::cuda({x}, {y}, op::Cast::Attrs{attrs.dtype});
  op::Sum::cuda({x}, {s}, op::Sum::Attrs{0, false});
}

}  // namespace tessera
