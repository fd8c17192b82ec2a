// fill on the GPU: the value is converted to the output dtype once on the host, then its bytes
// are replicated by a kernel over elements of that size.
#include <cstring>

#include "core/cuda/check.cuh"
#include "kernels/fill/fill.h"

namespace tessera {

namespace {

template <class Word>
__global__ void fill_words(Word* out, Word value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = value;
}

template <class Word>
void launch(const Tensor& out, const unsigned char* bytes) {
  Word w;
  std::memcpy(&w, bytes, sizeof(Word));
  const int64_t n = out.numel();
  fill_words<Word><<<cuda::blocks_for(n), 256, 0, cuda::current_stream(out)>>>(static_cast<Word*>(out.data_ptr()), w, n);
}

}  // namespace

void op::Fill::cuda(const std::vector<Tensor>&, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor& y = out[0];
  if (y.numel() == 0) return;
  unsigned char one[8] = {};
  convert_elements(&attrs.value, DType::f64, one, y.dtype(), 1);
  switch (dtype_size(y.dtype())) {
    case 1: return launch<uint8_t>(y, one);
    case 2: return launch<uint16_t>(y, one);
    case 4: return launch<uint32_t>(y, one);
    case 8: return launch<uint64_t>(y, one);
  }
  TS_THROW(DTypeError, "fill: no CUDA kernel for " << y.dtype());
}

}  // namespace tessera
