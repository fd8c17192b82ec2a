// The op list: every op tessera has, once. Each entry names the op's struct (in
// kernels/<folder>/<folder>.h). op_list.cpp instantiates every op's machinery from this
// list, so an op missing its shape rule, CPU kernel or backward rule fails the build.
//
// Adding an op: one line here, one folder under kernels/, one test.
#pragma once

#define TS_OP_LIST(X) \
  /* elementwise binary (broadcasting) */ \
  X(Add)                                  \
  X(Sub)                                  \
  X(Mul)                                  \
  X(Div)                                  \
  /* elementwise unary */                 \
  X(Neg)                                  \
  /* scalar forms */                      \
  X(MulScalar)                            \
  /* reductions */                        \
  X(Sum)                                  \
  /* linear algebra */                    \
  X(Matmul)                               \
  /* shape */                             \
  X(Copy)                                 \
  X(Reshape)                              \
  X(Expand)
