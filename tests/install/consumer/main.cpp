// Trains nothing: computes y = sum(x·w) and its gradient through the installed library.
#include <tessera/tessera.h>

#include <cstdio>

int main() {
  using namespace tessera;
  Tensor x = tensor({1, 2, 3, 4}, {2, 2});
  Tensor w = tensor({0.5, -1}, {2, 1}).requires_grad_();
  Tensor y = sum(matmul(x, w));
  y.backward();
  std::vector<float> g = w.grad().to_vector<float>();
  // dy/dw = column sums of x = [4, 6]; y = 0.5*4 - 6 = -4.
  bool ok = y.item<float>() == -4.0f && g[0] == 4.0f && g[1] == 6.0f;
  std::printf("tessera %s consumer: y = %g, dy/dw = [%g, %g] %s\n", TESSERA_VERSION, y.item<float>(), g[0], g[1],
              ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
