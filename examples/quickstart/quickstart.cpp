// The README's first program: a linear classifier's loss and gradients on random data.
#include <tessera/tessera.h>

#include <iostream>

using namespace tessera;

int main() {
  try {
    Generator gen(42);
    Tensor x = normal({64, 784}, 0, 1, gen);
    Tensor w = normal({784, 10}, 0, 0.05, gen).requires_grad_();
    Tensor b = zeros({10}).requires_grad_();
    Tensor targets = from_vector(std::vector<int32_t>(64, 3), {64});

    Tensor loss = cross_entropy(add(matmul(x, w), b), targets);
    loss.backward();  // w.grad(), b.grad() now hold the gradients
    std::cout << loss << "\n" << b.grad() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "quickstart: " << e.what() << "\n";
    return 1;
  }
}
