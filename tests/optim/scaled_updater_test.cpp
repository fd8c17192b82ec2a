// optim::ScaledUpdater: f16 loss scaling inside a compiled step equals the eager LossScaler loop,
// overflowing (skipped) steps included, bitwise on the CPU.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/autocast.h"
#include "core/graph/compile.h"
#include "gradcheck.h"
#include "kernels/ops.h"
#include "optim/optim.h"

namespace tessera {
namespace {

using Inputs = std::map<std::string, Tensor>;
using testing::all_close;

std::vector<graph::NamedParam> make_params() {
  Generator gen(9);
  return {{"w1", normal({6, 16}, 0, 0.5, gen).requires_grad_()}, {"w2", normal({16, 5}, 0, 0.5, gen).requires_grad_()}};
}

Tensor loss_of(const std::vector<graph::NamedParam>& ps, const Inputs& in) {
  autocast::Guard amp(DType::f16);
  return cross_entropy(matmul(tanh(matmul(in.at("x"), ps[0].tensor)), ps[1].tensor), in.at("y"));
}

TEST(ScaledUpdater, CompiledF16StepsEqualEagerLossScalingWithSkips) {
  // 2^24 overflows f16 gradients (max 65504) for the first steps: they are skipped and the
  // scale halves until the gradients fit, then training goes on.
  const optim::LossScalerOptions so = optim::LossScalerOptions().init_scale(16777216.0).growth_interval(3);
  std::vector<graph::NamedParam> pe = make_params(), pc = make_params();
  optim::AdamW oe(optim::param_groups_default(pe, 0.01), optim::AdamWOptions(0.05));
  optim::AdamW oc(optim::param_groups_default(pc, 0.01), optim::AdamWOptions(0.05));
  oe.set_clip_norm(1.0);
  oc.set_clip_norm(1.0);
  optim::LossScaler se(so), sc(so);
  optim::ScaledUpdater scaled(oc);
  Inputs in = {{"x", testing::test_randn({9, 6}, 5, DType::f32)},
               {"y", from_vector(std::vector<int32_t>{0, 3, 1, 4, 2, 2, 0, 1, 3}, {9})}};
  auto loss_fn = [&](const Inputs& feeds) {
    return scaled.scale_loss(loss_of(pc, feeds), feeds.at(optim::ScaledUpdater::kScaleInput));
  };
  Inputs feeds = in;
  feeds.insert(optim::ScaledUpdater::feed(sc));
  CompiledStep step = compile(loss_fn, pc, &scaled, feeds);
  int skipped = 0, taken = 0;
  for (int s = 0; s < 12; ++s) {
    Tensor loss = loss_of(pe, in);
    se.scale_loss(loss).backward();
    const bool stepped = se.step(oe);  // a skipped step counts, as in the compiled step
    oe.zero_grad();

    feeds = in;
    feeds.insert(optim::ScaledUpdater::feed(sc));
    const double lc = step.run(feeds) / sc.scale();
    const bool finite = step.fetch("grads_finite").item<float>() != 0;
    sc.update(!finite);

    ASSERT_EQ(lc, loss.item<double>()) << "step " << s;
    ASSERT_EQ(finite, stepped) << "step " << s;
    ASSERT_EQ(sc.scale(), se.scale()) << "step " << s;
    (stepped ? taken : skipped) += 1;
  }
  EXPECT_GE(skipped, 2);
  EXPECT_GE(taken, 4);
  EXPECT_EQ(oc.step_count(), oe.step_count());
  for (size_t i = 0; i < pe.size(); ++i) EXPECT_TRUE(all_close(pc[i].tensor, pe[i].tensor, 0, 0)) << pe[i].name;
  const std::vector<Tensor> ste = oe.state(), stc = oc.state();
  for (size_t i = 0; i < ste.size(); ++i) EXPECT_TRUE(all_close(stc[i], ste[i], 0, 0)) << "state " << i;
}

TEST(ScaledUpdater, LossFunctionMustScaleTheLoss) {
  std::vector<graph::NamedParam> ps = make_params();
  optim::AdamW opt(optim::param_groups_default(ps, 0.0), optim::AdamWOptions(0.05));
  optim::ScaledUpdater scaled(opt);
  Inputs in = {{"x", testing::test_randn({9, 6}, 5, DType::f32)},
               {"y", from_vector(std::vector<int32_t>{0, 3, 1, 4, 2, 2, 0, 1, 3}, {9})}};
  testing::expect_error<ValueError>(
      [&] { compile([&](const Inputs& f) { return loss_of(ps, f); }, ps, &scaled, in); }, {"ScaledUpdater", "scale_loss"});
  testing::expect_error<ValueError>([&] { scaled.scale_loss(full({}, 1.0), full({2}, 1.0)); },
                                    {"ScaledUpdater", "one-element f32"});
}

}  // namespace
}  // namespace tessera
