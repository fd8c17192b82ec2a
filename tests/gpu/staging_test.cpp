// Host-to-device copies through the ring of pinned staging buffers (core/cuda/runtime.cu):
// back-to-back copies from one host buffer, rewritten as soon as each call returns, of sizes
// that make the ring add and grow buffers and reuse them (more copies than it has slots), queued
// behind long-running kernels: every copy arrives intact and in stream order.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/cuda/runtime.h"
#include "gpu_check.h"
#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using namespace gpu_test;

// Pattern of copy k: element i = k·1000003 + i·7 (distinct per copy and per element).
int32_t pattern(int k, int64_t i) { return static_cast<int32_t>(k * 1000003 + i * 7); }

// Keeps the stream busy for a while, so that the copies queued next are still pending when the
// host rewrites its buffer (a few 2048² matmuls, kept alive until the stream has run them).
std::vector<Tensor> busy_stream() {
  std::vector<Tensor> keep{ones({2048, 2048}, TensorOptions(DType::f32).device(kGpu))};
  for (int i = 0; i < 6; ++i) keep.push_back(matmul(keep.back(), keep[0]));
  return keep;
}

TEST(CudaStaging, BackToBackCopiesOfDifferentDataArriveIntact) {
  REQUIRE_GPU();
  // Element counts: tiny, odd, bigger than the first buffers (growth), a few MiB; 24 copies.
  const int64_t kSizes[] = {1, 3, 1000, 1 << 18, 7, (3 << 20) + 5, 2, 4096};
  std::vector<Tensor> dst;
  std::vector<int64_t> sizes;
  std::vector<int32_t> host;  // one host buffer for all copies, rewritten after each call
  const std::vector<Tensor> keep = busy_stream();
  for (int k = 0; k < 24; ++k) {
    const int64_t n = kSizes[k % 8];
    host.assign(static_cast<size_t>(n), 0);
    for (int64_t i = 0; i < n; ++i) host[i] = pattern(k, i);
    dst.push_back(empty({n}, TensorOptions(DType::i32).device(kGpu)));
    sizes.push_back(n);
    cuda::copy(dst.back().data_ptr(), kGpu, host.data(), Device::cpu(), sizeof(int32_t) * n);
    for (int32_t& v : host) v = -1;  // the copy must already hold its own snapshot
  }
  for (int k = 0; k < 24; ++k) {
    const std::vector<int32_t> got = dst[k].to_vector<int32_t>();
    ASSERT_EQ(static_cast<int64_t>(got.size()), sizes[k]);
    for (int64_t i = 0; i < sizes[k]; ++i) ASSERT_EQ(got[i], pattern(k, i)) << "copy " << k << ", element " << i;
  }
}

TEST(CudaStaging, CopiesIntoOneBufferInterleavedWithKernelsKeepStreamOrder) {
  REQUIRE_GPU();
  // x <- v_k, then acc += x, twenty times: each kernel sees the copy queued just before it.
  const int64_t n = 10007;
  Tensor x = empty({n}, TensorOptions(DType::f32).device(kGpu));
  Tensor acc = zeros({n}, TensorOptions(DType::f32).device(kGpu));
  std::vector<double> want(n, 0.0);
  std::vector<float> host(n);
  const std::vector<Tensor> keep = busy_stream();
  for (int k = 0; k < 20; ++k) {
    for (int64_t i = 0; i < n; ++i) host[i] = static_cast<float>((k + 1) * ((i % 13) + 1));
    cuda::copy(x.data_ptr(), kGpu, host.data(), Device::cpu(), sizeof(float) * n);
    for (int64_t i = 0; i < n; ++i) want[i] += host[i];
    acc = add(acc, x);
  }
  EXPECT_TRUE(testing::all_close(acc, want, 0, 0));
}

}  // namespace
}  // namespace tessera
