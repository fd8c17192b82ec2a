// Shape rules run without data: a model traced on symbolic tensors gets its output shapes
// (and every argument check) without a single kernel running.
#include <gtest/gtest.h>

#include "core/op.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

// A small MLP classifier: [B, 784] -> 256 -> 10, cross-entropy against integer targets.
struct Mlp {
  Tensor w1, b1, w2, b2;
  Tensor logits(const Tensor& x) const {
    Tensor h = add(matmul(x, w1), b1);
    return add(matmul(h, w2), b2);
  }
};

TEST(Symbolic, InfersAModelsShapesWithoutRunningKernels) {
  Mlp mlp{symbolic({784, 256}), symbolic({256}), symbolic({256, 10}), symbolic({10})};
  Tensor x = symbolic({32, 784});
  const uint64_t before = kernels_run();
  Tensor logits = mlp.logits(x);
  Tensor loss = mean(logits);
  EXPECT_EQ(kernels_run(), before) << "a kernel ran on symbolic inputs";
  EXPECT_TRUE(logits.is_symbolic());
  EXPECT_EQ(logits.shape(), Shape({32, 10}));
  EXPECT_EQ(loss.shape(), Shape({}));
  EXPECT_EQ(loss.dtype(), DType::f32);
  Tensor heads = reshape(logits, {32, 2, 5});
  EXPECT_EQ(heads.shape(), Shape({32, 2, 5}));
  EXPECT_EQ(sum(heads, 1, /*keepdim=*/true).shape(), Shape({32, 1, 5}));
}

TEST(Symbolic, ShapeErrorsSurfaceWithoutData) {
  Mlp bad{symbolic({784, 256}), symbolic({256}), symbolic({128, 10}), symbolic({10})};
  try {
    bad.logits(symbolic({32, 784}));
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("[32, 256]"), std::string::npos) << m;
    EXPECT_NE(m.find("[128, 10]"), std::string::npos) << m;
  }
}

// A tracer sees every op with its inputs and outputs, in program order.
class RecordingTracer : public Tracer {
 public:
  std::vector<std::string> ops;
  std::vector<Shape> out_shapes;
  void record(const std::shared_ptr<const OpInstance>& op, const std::vector<Tensor>&,
              const std::vector<Tensor>& outputs) override {
    ops.push_back(op->name());
    out_shapes.push_back(outputs[0].shape());
  }
};

TEST(Symbolic, TracerRecordsOpsInOrder) {
  RecordingTracer tracer;
  Tracer* prev = set_current_tracer(&tracer);
  Tensor y = sum(add(matmul(symbolic({4, 3}), symbolic({3, 2})), symbolic({2})), 1);
  set_current_tracer(prev);
  EXPECT_EQ(tracer.ops, (std::vector<std::string>{"matmul", "add", "sum"}));
  EXPECT_EQ(tracer.out_shapes.back(), Shape({4}));
  EXPECT_EQ(current_tracer(), prev);
}

}  // namespace
}  // namespace tessera
