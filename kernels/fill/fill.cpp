#include "kernels/fill/fill.h"

#include <cstring>

namespace tessera {

Tensor fill(const TensorMeta& meta, double value) { return call<op::Fill>({meta, value}, {})[0]; }

std::vector<TensorMeta> op::Fill::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 0);
  return {attrs.meta};
}

void op::Fill::cpu(const std::vector<Tensor>&, const std::vector<Tensor>& out, const Attrs& attrs) {
  // Convert the value once, then replicate its bytes.
  const size_t es = dtype_size(out[0].dtype());
  unsigned char one[8];
  convert_elements(&attrs.value, DType::f64, one, out[0].dtype(), 1);
  auto* p = static_cast<unsigned char*>(out[0].data_ptr());
  const int64_t n = out[0].numel();
  for (int64_t i = 0; i < n; ++i) std::memcpy(p + i * es, one, es);
}

}  // namespace tessera
