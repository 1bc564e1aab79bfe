#pragma once
// Stochastic gradient descent on one flat parameter buffer, with exactly the semantics of
// torch.optim.SGD (dampening 0): weight decay added to the gradient, a momentum buffer
// initialised to the first gradient, optional Nesterov momentum.
#include <ATen/core/Tensor.h>

namespace pstrain::optim {

struct SgdOptions {
  double momentum = 0;
  double weightDecay = 0;
  bool nesterov = false;
};

class Sgd {
 public:
  explicit Sgd(SgdOptions options) : options_(options) {}

  // params -= lr * direction(grad / gradDivisor). `params` and `grad` are 1-D float tensors
  // of equal size on the same device; `grad` is used as scratch space and left unspecified.
  // Returns whether every new weight is finite: a non-finite gradient always makes one
  // non-finite, so this is the finite check of the gradient (and of an overflow) in the
  // same pass; when false, params and the momentum buffer are spoiled (a caller that goes
  // on after a non-finite gradient checks it before: allFinite).
  bool step(at::Tensor& params, at::Tensor& grad, double lr, double gradDivisor = 1);

  // The same on the slice [offset, offset + params.numel()) of a flat buffer of `total`
  // elements (the server updates a gradient bucket as soon as it is reduced). A step over
  // every slice equals one step() over the whole buffer.
  bool stepSlice(at::Tensor params, at::Tensor grad, double lr, std::int64_t offset, std::int64_t total,
                 double gradDivisor = 1);

  // Undefined until the first step with momentum (as in PyTorch's optimizer state, which
  // starts as the first gradient; here as zeros times momentum plus it: the same values).
  const at::Tensor& momentumBuffer() const { return momentum_; }
  void setMomentumBuffer(at::Tensor buffer) { momentum_ = std::move(buffer); }

 private:
  SgdOptions options_;
  at::Tensor momentum_;
};

}  // namespace pstrain::optim
