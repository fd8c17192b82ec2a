// The op list: every op tessera has, once. Each entry names the op's struct (tessera::op::<Name>,
// in kernels/<folder>/<folder>.h). op_list.cpp instantiates every op's machinery from this
// list, so an op missing its shape rule, CPU kernel or backward rule fails the build.
//
// Adding an op: one line here, its folder under kernels/ (<op>.h, <op>.cpp, <op>.cu), its include
// in kernels/ops.h, a row in docs/ops.md (tests/kernels/op_docs_test.cpp checks it), and its
// tests (tests/kernels, and tests/gpu for the CUDA kernel); docs/architecture.md walks the path.
#pragma once

#include <string>
#include <vector>

#define TS_OP_LIST(X) \
  /* elementwise binary (broadcasting) */ \
  X(Add)                                  \
  X(Sub)                                  \
  X(Mul)                                  \
  X(Div)                                  \
  /* elementwise unary */                 \
  X(Neg)                                  \
  X(Exp)                                  \
  X(Log)                                  \
  X(Sqrt)                                 \
  X(Rsqrt)                                \
  X(Tanh)                                 \
  X(Sigmoid)                              \
  X(Relu)                                 \
  X(Gelu)                                 \
  X(GeluBackward)                         \
  X(FastGelu)                             \
  X(Clamp)                                \
  X(Cast)                                 \
  /* scalar forms */                      \
  X(MulScalar)                            \
  X(AddScalar)                            \
  X(PowScalar)                            \
  /* comparison and selection */          \
  X(Compare)                              \
  X(Where)                                \
  X(MaskedFill)                           \
  /* reductions */                        \
  X(Sum)                                  \
  X(Max)                                  \
  X(Min)                                  \
  X(MaxBackward)                          \
  X(SumSquares)                           \
  /* linear algebra */                    \
  X(Matmul)                               \
  X(Linear)                               \
  X(CastColSum)                           \
  X(ColSum)                               \
  /* block sparse */                      \
  X(Bsmm)                                 \
  X(BsmmDx)                               \
  X(BsmmDw)                               \
  X(BsmmDwPair)                           \
  X(BsConv)                               \
  X(BsConvDx)                             \
  X(BsConvDw)                             \
  X(EdgeBias)                             \
  X(EdgeBiasGrad)                         \
  /* neural network */                    \
  X(Softmax)                              \
  X(LogSoftmax)                           \
  X(LogSoftmaxBackward)                   \
  X(CausalSoftmax)                        \
  X(CausalSoftmaxBackward)                \
  X(CrossEntropy)                         \
  X(CrossEntropyBackward)                 \
  X(LayerNorm)                            \
  X(LayerNormBackward)                    \
  X(QkLayerNorm)                          \
  X(QkLayerNormBackward)                  \
  X(LstmGates)                            \
  X(LstmGatesBackward)                    \
  X(CudnnLstm)                            \
  X(CudnnLstmBackward)                    \
  X(LstmRecurrence)                       \
  X(LstmRecurrenceBackward)               \
  X(SparseLayerNorm)                      \
  X(SparseLayerNormBackward)              \
  X(Dropout)                              \
  X(BlockAttention)                       \
  X(BlockAttentionBackward)               \
  X(BlockAttentionPacked)                 \
  X(BlockAttentionPackedBackward)         \
  /* optimizer updates */                 \
  X(SgdUpdate)                            \
  X(AdamUpdate)                           \
  X(AdamMultiUpdate)                      \
  X(AdafactorUpdate)                      \
  X(AdafactorFactoredUpdate)              \
  /* shape */                             \
  X(Fill)                                 \
  X(Copy)                                 \
  X(ToDevice)                             \
  X(Reshape)                              \
  X(Expand)                               \
  X(Transpose)                            \
  X(Permute)                              \
  X(Concat)                               \
  X(Split)                                \
  X(Slice)                                \
  X(SliceBackward)                        \
  X(IndexSelect)                          \
  X(IndexSelectBackward)                  \
  /* collectives (data parallelism) */    \
  X(AllReduce)                            \
  X(SegmentReduce)                        \
  X(SegmentBroadcast)                     \
  X(CollectiveWait)

namespace tessera {
/// The `kName` of every op of TS_OP_LIST, in list order (tests check with it that each op has its
/// row in docs/ops.md).
const std::vector<std::string>& op_names();
}  // namespace tessera
