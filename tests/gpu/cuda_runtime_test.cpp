// GPU tests: run on a machine with a GPU, skip visibly elsewhere (ctest label `gpu`).
#include <gtest/gtest.h>

#include "core/device.h"
#ifdef TESSERA_WITH_CUDA
#include "core/cuda/runtime.h"
#endif

namespace tessera {
namespace {

TEST(CudaRuntime, SmokeKernelWritesEveryElement) {
#ifndef TESSERA_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (!cuda_available()) GTEST_SKIP() << "no GPU visible";
  const int n = 1000;  // not a multiple of the block size: the tail block must be guarded
  std::vector<float> v = cuda::smoke_test(n);
  ASSERT_EQ(v.size(), static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ASSERT_EQ(v[i], static_cast<float>(i) * static_cast<float>(i)) << "element " << i;
#endif
}

}  // namespace
}  // namespace tessera
