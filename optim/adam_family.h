// What Adam and AdamW share: their options (chainable setters, validation) and their state
// (first and second moments per parameter). They differ only in where weight decay enters
// (the decay attribute of the op adam_update, see kernels/common/adam_step.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kernels/common/adam_step.h"
#include "optim/optimizer.h"

namespace tessera {
namespace optim {
namespace detail {

/// Hyperparameters with chainable setters; `Tag` gives the optimizer's name (kName) and its
/// default weight decay (kWeightDecay). Checked when the optimizer is made.
template <class Tag>
class AdamFamilyOptions {
 public:
  explicit AdamFamilyOptions(double lr = 1e-3) : lr_(lr) {}

  AdamFamilyOptions& lr(double v) { lr_ = v; return *this; }
  AdamFamilyOptions& betas(double b1, double b2) { beta1_ = b1; beta2_ = b2; return *this; }
  AdamFamilyOptions& eps(double v) { eps_ = v; return *this; }
  AdamFamilyOptions& weight_decay(double v) { weight_decay_ = v; return *this; }

  double lr() const { return lr_; }
  double beta1() const { return beta1_; }
  double beta2() const { return beta2_; }
  double eps() const { return eps_; }
  double weight_decay() const { return weight_decay_; }

  /// ValueError unless lr >= 0, 0 <= beta1, beta2 < 1, eps >= 0, weight_decay >= 0 (finite).
  void validate() const {
    const char* n = Tag::kName;
    TS_CHECK(std::isfinite(lr_) && lr_ >= 0, ValueError, n << ": lr must be finite and >= 0, got " << lr_);
    TS_CHECK(beta1_ >= 0 && beta1_ < 1, ValueError, n << ": beta1 must be in [0, 1), got " << beta1_);
    TS_CHECK(beta2_ >= 0 && beta2_ < 1, ValueError, n << ": beta2 must be in [0, 1), got " << beta2_);
    TS_CHECK(std::isfinite(eps_) && eps_ >= 0, ValueError, n << ": eps must be finite and >= 0, got " << eps_);
    TS_CHECK(std::isfinite(weight_decay_) && weight_decay_ >= 0, ValueError,
             n << ": weight_decay must be finite and >= 0, got " << weight_decay_);
  }

 private:
  double lr_;
  double beta1_ = 0.9;
  double beta2_ = 0.999;
  double eps_ = 1e-8;
  double weight_decay_ = Tag::kWeightDecay;
};

/// Elements of one bucket of update_all (2^22: 16 MB of f32 gradients).
constexpr int64_t kAdamBucketElements = int64_t{1} << 22;

/// The moments m and v of every parameter, their state order and names, the hyperparameter
/// list, and the writes of one update.
class AdamMoments : public Optimizer {
 public:
  /// First moments m of every parameter (params() order), then second moments v:
  /// {m_0, ..., m_{n-1}, v_0, ..., v_{n-1}}. Zeros before the first step.
  std::vector<Tensor> state() const override;
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  /// lr, beta1, beta2, eps, weight_decay.
  std::vector<std::pair<std::string, double>> hyperparameters() const override;
  /// The updates of every parameter with a defined gradient (clipped when set_clip_norm() is
  /// on), as adam_multi_update ops over buckets of parameters: walking params() backwards (the
  /// order in which backward finishes their gradients), one bucket per (dtype, device), closed
  /// at kAdamBucketElements. A few kernel launches per step instead of one per parameter, each
  /// element bitwise what update_scaled() gives it. A compiled step runs each bucket's op as
  /// soon as its last gradient is final (core/graph's update scheduling), so a bucket keeps at
  /// most its own gradients alive past their last use.
  std::vector<Write> update_all(const std::vector<Tensor>& grads, const Tensor& lr, const Tensor& step) override;

 protected:
  AdamMoments(const std::vector<ParamGroup>& groups, double lr, double beta1, double beta2, double eps,
              double weight_decay, AdamDecay decay);
  /// Checks i; the writes {p <- out[0], m <- out[1], v <- out[2]}.
  void check_index(const char* name, size_t i) const;
  std::vector<Write> writes(size_t i, const std::vector<Tensor>& out) const;

  double beta1_, beta2_, eps_, default_weight_decay_;
  AdamDecay decay_;  // where weight decay enters: Adam coupled, AdamW decoupled
  std::vector<Tensor> exp_avg_;     // m, one per parameter
  std::vector<Tensor> exp_avg_sq_;  // v, one per parameter
};

}  // namespace detail
}  // namespace optim
}  // namespace tessera
