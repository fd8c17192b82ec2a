// dist::plan_buckets (reverse parameter order, a small first bucket, one dtype per bucket, large
// parameters alone) and average_gradients on a group of one process (the gradients unchanged)
// and its errors. The multi-process runs are in mpi_group_mpitest.cpp (ctest mpi_np2, mpi_np3).
#include <gtest/gtest.h>

#include "core/distributed/data_parallel.h"
#include "core/error.h"
#include "core/random.h"

namespace tessera {
namespace {

std::vector<size_t> flat(const std::vector<dist::GradientBucket>& buckets) {
  std::vector<size_t> order;
  for (const auto& b : buckets) order.insert(order.end(), b.params.begin(), b.params.end());
  return order;
}

TEST(PlanBuckets, ReverseOrderSmallFirstBucketThenFullOnes) {
  // five f32 parameters of 100 elements (400 bytes): first bucket 400 bytes, then 1000
  std::vector<Tensor> params;
  for (int i = 0; i < 5; ++i) params.push_back(zeros({10, 10}));
  const auto buckets = dist::plan_buckets(params, 1000, 400);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].params, (std::vector<size_t>{4}));
  EXPECT_EQ(buckets[1].params, (std::vector<size_t>{3, 2}));
  EXPECT_EQ(buckets[2].params, (std::vector<size_t>{1, 0}));
  EXPECT_EQ(buckets[1].elements, 200);
  EXPECT_EQ(flat(dist::plan_buckets(params)), (std::vector<size_t>{4, 3, 2, 1, 0}));
  EXPECT_EQ(dist::plan_buckets(params).size(), 1u) << "2 KB fit the default 1 MB first bucket";
}

TEST(PlanBuckets, LargeParametersAloneAndOneDtypePerBucket) {
  const std::vector<Tensor> params{zeros({4}), zeros({1000}), zeros({4}, TensorOptions(DType::f64)), zeros({4})};
  const auto buckets = dist::plan_buckets(params, 100, 100);
  EXPECT_EQ(flat(buckets), (std::vector<size_t>{3, 2, 1, 0}));
  ASSERT_EQ(buckets.size(), 4u);
  EXPECT_EQ(buckets[1].dtype, DType::f64);
  EXPECT_EQ(buckets[2].params, (std::vector<size_t>{1})) << "4000 bytes: a bucket of its own";
  EXPECT_THROW(dist::plan_buckets(params, 0, 100), ValueError);
  EXPECT_THROW(dist::plan_buckets({Tensor()}), ValueError);
}

TEST(AverageGradients, OneProcessLeavesTheGradientsAndNamesAMissingOne) {
  Generator gen(3);
  std::vector<Tensor> params{normal({3, 4}, 0, 1, gen).requires_grad_(), normal({5}, 0, 1, gen).requires_grad_()};
  for (Tensor& p : params) p.set_grad(normal(p.shape(), 0, 1, gen));
  const std::vector<float> before = params[0].grad().to_vector<float>();
  auto group = dist::single_process_group();
  EXPECT_EQ(group->size(), 1);
  dist::average_gradients(params, dist::plan_buckets(params), *group);
  EXPECT_EQ(params[0].grad().to_vector<float>(), before);

  // a group of two (simulated: sums to twice, averages to itself) still needs every gradient
  class Twice : public dist::ProcessGroup {
   public:
    int rank() const override { return 0; }
    int size() const override { return 2; }
    std::string backend() const override { return "test"; }
    void all_reduce(Tensor& t, dist::ReduceOp) override { ++calls; (void)t; }
    void broadcast(Tensor&, int) override {}
    void barrier() override {}
    int calls = 0;
  } twice;
  const auto buckets = dist::plan_buckets(params, 48, 48);  // [5] (20 bytes), then [3, 4] (48)
  ASSERT_EQ(buckets.size(), 2u);
  dist::average_gradients(params, buckets, twice);
  EXPECT_EQ(twice.calls, 2) << "one all-reduce per bucket";
  EXPECT_EQ(params[0].grad().to_vector<float>(), before) << "packed and unpacked in place";
  params[1].zero_grad();
  try {
    dist::average_gradients(params, buckets, twice);
    ADD_FAILURE() << "no error for a parameter without a gradient";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 1 [5] has no gradient"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera
