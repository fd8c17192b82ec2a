// transpose on the GPU: the permute kernel (kernels/permute/permute.cu) with perm
// (0, ..., n-3, n-1, n-2), which runs as a batched tiled transpose through shared memory.
#include <numeric>
#include <utility>

#include "kernels/permute/permute.h"
#include "kernels/transpose/transpose.h"

namespace tessera {

void op::Transpose::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  const int nd = in[0].dim();
  std::vector<int> perm(nd);
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[nd - 2], perm[nd - 1]);
  cuda::permute_copy(in[0], out[0], perm);
}

}  // namespace tessera
