#include "kernels/common/elementwise.h"

namespace tessera {
namespace cpu {

std::vector<int64_t> broadcast_strides(const Shape& s, const Shape& out) {
  std::vector<int64_t> st(out.ndim(), 0);
  std::vector<int64_t> own = s.strides();
  const int lead = out.ndim() - s.ndim();
  for (int d = 0; d < s.ndim(); ++d) st[lead + d] = s[d] == 1 ? 0 : own[d];
  return st;
}

}  // namespace cpu
}  // namespace tessera
