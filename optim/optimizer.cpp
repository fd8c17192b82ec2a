#include "optim/optimizer.h"

#include <cstring>

#include "core/autograd.h"

namespace tessera {
namespace optim {

Optimizer::Optimizer(std::vector<Tensor> params, double lr) : params_(std::move(params)), lr_(lr) {
  for (size_t i = 0; i < params_.size(); ++i) {
    TS_CHECK(params_[i].defined(), ValueError, "optimizer: parameter " << i << " is undefined");
    TS_CHECK(params_[i].dtype() == DType::f32 || params_[i].dtype() == DType::f64, DTypeError,
             "optimizer: parameter " << i << " is " << params_[i].meta() << "; master weights must be f32 or f64");
    TS_CHECK(params_[i].is_leaf(), ValueError, "optimizer: parameter " << i << " is not a leaf tensor");
  }
}

void Optimizer::step() {
  NoGradGuard no_grad;
  ++step_;
  Tensor lr = full({}, lr_, DType::f64), t = full({}, static_cast<double>(step_), DType::f64);
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor g = params_[i].grad();
    if (!g.defined()) continue;
    for (const Write& w : update(i, g, lr, t)) {
      TS_CHECK(w.target.meta() == w.value.meta(), ShapeError,
               "optimizer: update of parameter " << i << " wrote " << w.value.meta() << " into " << w.target.meta());
      std::memcpy(w.target.data_ptr(), w.value.data_ptr(), w.value.nbytes());
    }
  }
}

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.zero_grad();
}

}  // namespace optim
}  // namespace tessera
