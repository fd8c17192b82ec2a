// Trains nothing: computes y = sum(x·w) and its gradient through tessera, on the CPU only (the
// tests run on machines without a GPU: nothing here touches one), and reports the build switches
// it sees. Built by the tests of tests/CMakeLists.txt (label `install`) against an install and
// against the build folder with find_package(tessera), and by hand with pkg-config (no -D flags:
// the switches then come from tessera/build_config.h alone).
//
// TESSERA_CONSUMER_EXPECT_CUDA (0 or 1, given by the test, not by tessera): when defined, the
// program fails unless it sees TESSERA_WITH_CUDA exactly when the test expects it.
#include <tessera/tessera.h>

#include <cstdio>

int main() {
  using namespace tessera;
#ifdef TESSERA_WITH_CUDA
  const bool sees_cuda = true;
#else
  const bool sees_cuda = false;
#endif
#ifdef TESSERA_HAVE_CUDNN
  const bool sees_cudnn = true;
#else
  const bool sees_cudnn = false;
#endif
  // The lines the pkg-config test reads (tests/install/pkgconfig_consumer.sh).
  std::printf("TESSERA_WITH_CUDA=%d\nTESSERA_HAVE_CUDNN=%d\n", sees_cuda ? 1 : 0, sees_cudnn ? 1 : 0);
  bool ok = true;
#ifdef TESSERA_CONSUMER_EXPECT_CUDA
  if (sees_cuda != (TESSERA_CONSUMER_EXPECT_CUDA != 0)) {
    std::printf("WRONG: the test expects TESSERA_WITH_CUDA %s, the program sees it %s\n",
                TESSERA_CONSUMER_EXPECT_CUDA ? "defined" : "undefined", sees_cuda ? "defined" : "undefined");
    ok = false;
  }
#endif

  Tensor x = tensor({1, 2, 3, 4}, {2, 2});
  Tensor w = tensor({0.5, -1}, {2, 1}).requires_grad_();
  Tensor y = sum(matmul(x, w));
  y.backward();
  std::vector<float> g = w.grad().to_vector<float>();
  // dy/dw = column sums of x = [4, 6]; y = 0.5*4 - 6 = -4.
  const bool grad_ok = y.item<float>() == -4.0f && g[0] == 4.0f && g[1] == 6.0f;
  ok = ok && grad_ok;
  std::printf("tessera %s consumer: y = %g, dy/dw = [%g, %g] %s\n", TESSERA_VERSION, y.item<float>(), g[0], g[1],
              grad_ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
