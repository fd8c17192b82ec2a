#include <gtest/gtest.h>

#include <cmath>

#include "core/tensor.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

TEST(Tensor, CreationAndMetadata) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.shape(), Shape({2, 3}));
  EXPECT_EQ(z.dtype(), DType::f32);
  EXPECT_EQ(z.device(), Device::cpu());
  EXPECT_EQ(z.numel(), 6);
  EXPECT_EQ(z.to_vector<float>(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(ones({4}, DType::f64).to_vector<double>(), std::vector<double>(4, 1.0));
  EXPECT_EQ(full({2}, 7.5).to_vector<float>(), (std::vector<float>{7.5f, 7.5f}));
  EXPECT_EQ(arange(5).to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(5).dtype(), DType::i32);
  EXPECT_EQ(arange(1.0, 2.0, 0.25).to_vector<float>(), (std::vector<float>{1, 1.25, 1.5, 1.75}));
  EXPECT_EQ(arange(3.0, 0.0, -1.0).to_vector<float>(), (std::vector<float>{3, 2, 1}));
  Tensor v = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {3, 2});
  EXPECT_EQ(v.dtype(), DType::f64);
  EXPECT_EQ(v.to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(tensor({1, 2, 3, 4}, {2, 2}).shape(), Shape({2, 2}));
  EXPECT_EQ(tensor({2.5}).item<float>(), 2.5f);
}

TEST(Tensor, ScalarHasOneElement) {
  Tensor s = full({}, 3.0);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.item<double>(), 3.0);
}

TEST(Tensor, DataIsAligned) {
  for (int n : {1, 3, 17, 1000}) {
    Tensor t = empty({n});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % kCpuAlignment, 0u);
  }
}

TEST(Tensor, CopiesShareTheImpl_CloneDoesNot) {
  Tensor a = zeros({3});
  Tensor b = a;
  b.data<float>()[0] = 5;
  EXPECT_EQ(a.to_vector<float>()[0], 5.0f);
  Tensor c = a.clone();
  c.data<float>()[1] = 9;
  EXPECT_EQ(a.to_vector<float>()[1], 0.0f);
  EXPECT_EQ(c.to_vector<float>()[0], 5.0f);
}

TEST(Tensor, Errors) {
  EXPECT_THROW(from_vector(std::vector<float>{1, 2, 3}, {2, 2}), ShapeError);
  EXPECT_THROW(zeros({2}).data<double>(), DTypeError);
  EXPECT_THROW(zeros({2}).item<float>(), ShapeError);
  EXPECT_THROW(zeros({2}, DType::i32).requires_grad_(), DTypeError);
  EXPECT_THROW(Shape({1, 2, 3, 4, 5, 6, 7, 8, 9}), ShapeError);
  EXPECT_THROW(Shape({2, -1}), ShapeError);
  EXPECT_THROW(Device::parse("tpu"), ValueError);
  EXPECT_THROW(Tensor().shape(), ValueError);
  EXPECT_THROW(empty({2}, TensorOptions().device(Device::cuda(0))), DeviceError);
  EXPECT_THROW(dtype_from_name("f8"), ValueError);
}

TEST(Tensor, PrintsShapeDtypeDeviceAndValues) {
  std::string s = tensor({1, 2, 3, 4, 5, 6}, {2, 3}).str();
  EXPECT_NE(s.find("shape=[2, 3]"), std::string::npos) << s;
  EXPECT_NE(s.find("dtype=f32"), std::string::npos) << s;
  EXPECT_NE(s.find("device=cpu"), std::string::npos) << s;
  EXPECT_NE(s.find("[[1, 2, 3],\n [4, 5, 6]]"), std::string::npos) << s;
  std::string small = arange(10).str();
  EXPECT_NE(small.find("[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"), std::string::npos) << small;
  std::string big = arange(2000).str();
  EXPECT_NE(big.find("[0, 1, 2, ..., 1997, 1998, 1999]"), std::string::npos) << big;
  std::string big2d = arange(4000).str();
  EXPECT_EQ(big2d.find("1000,"), std::string::npos) << "summarized output must skip the middle";
  EXPECT_NE(symbolic({4, 5}).str().find("symbolic"), std::string::npos);
}

TEST(Tensor, SymbolicTensorsHaveNoData) {
  Tensor s = symbolic({4, 5}, DType::bf16);
  EXPECT_TRUE(s.is_symbolic());
  EXPECT_EQ(s.nbytes(), 40u);
  EXPECT_THROW(s.data_ptr(), ValueError);
  try {
    s.item<float>();
    FAIL() << "item() on a symbolic tensor must throw";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("item()"), std::string::npos) << e.what();
  }
}

TEST(Device, ParseAndPrint) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda:1"), Device::cuda(1));
  EXPECT_EQ(Device::cuda(2).str(), "cuda:2");
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST(Convert, FloatToIntegerTruncatesAndSaturates) {
  Tensor f = from_vector(std::vector<double>{2.9, -2.9, 300, -1, 1e10, -1e10, std::nan("")}, {7});
  std::vector<double> v = f.to_vector<double>();
  std::vector<uint8_t> u(7);
  convert_elements(f.data_ptr(), DType::f64, u.data(), DType::u8, 7);
  EXPECT_EQ(u, (std::vector<uint8_t>{2, 0, 255, 0, 255, 0, 0}));
  std::vector<int32_t> i(7);
  convert_elements(f.data_ptr(), DType::f64, i.data(), DType::i32, 7);
  EXPECT_EQ(i, (std::vector<int32_t>{2, -2, 300, -1, 2147483647, -2147483647 - 1, 0}));
}

}  // namespace
}  // namespace tessera
