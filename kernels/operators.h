// Arithmetic operators on tensors, for readable model code:
//
//   Tensor y = (x - mu) * rstd * gamma + beta;   // Tensor op Tensor broadcasts (numpy rules)
//   Tensor z = 1.0 - sigmoid(x) / 2;              // double op Tensor and Tensor op double
//
// Each operator is the named op function (add, sub, mul, div, neg and their scalar forms), so
// gradients and tracing work the same. There are no compound assignments (+=): a Tensor is a
// shared handle, and `a = a + b` makes the rebinding explicit.
#pragma once

#include "core/tensor.h"
#include "kernels/add/add.h"
#include "kernels/add_scalar/add_scalar.h"
#include "kernels/div/div.h"
#include "kernels/mul/mul.h"
#include "kernels/mul_scalar/mul_scalar.h"
#include "kernels/neg/neg.h"
#include "kernels/pow_scalar/pow_scalar.h"
#include "kernels/sub/sub.h"

namespace tessera {

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }

inline Tensor operator+(const Tensor& x, double s) { return add(x, s); }
inline Tensor operator-(const Tensor& x, double s) { return sub(x, s); }
inline Tensor operator*(const Tensor& x, double s) { return mul(x, s); }
inline Tensor operator/(const Tensor& x, double s) { return div(x, s); }

inline Tensor operator+(double s, const Tensor& x) { return add(x, s); }
inline Tensor operator-(double s, const Tensor& x) { return sub(s, x); }
inline Tensor operator*(double s, const Tensor& x) { return mul(x, s); }
inline Tensor operator/(double s, const Tensor& x) { return div(s, x); }

inline Tensor operator-(const Tensor& x) { return neg(x); }

}  // namespace tessera
