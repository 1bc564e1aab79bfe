#pragma once
// Stochastic gradient descent on one flat parameter buffer, with exactly the semantics of
// torch.optim.SGD (dampening 0): weight decay added to the gradient, a momentum buffer
// initialised to the first gradient, optional Nesterov momentum.
#include <ATen/core/Tensor.h>

#include "runtime/optim/Optimizer.h"

namespace pstrain::optim {

struct SgdOptions {
  double momentum = 0;
  double weightDecay = 0;
  bool nesterov = false;
};

class Sgd : public Optimizer {
 public:
  explicit Sgd(SgdOptions options);


  // The momentum buffer: undefined until the first step with momentum (as in PyTorch's
  // optimizer state, which starts as the first gradient; here as zeros times momentum plus
  // it: the same values).
  const at::Tensor& momentumBuffer() const { return stateBuffer(0); }

 protected:
  bool stepRun(at::Tensor params, at::Tensor grad, double lr, std::int64_t offset, std::int64_t total,
               double gradDivisor, bool decay) override;

 private:
  SgdOptions options_;
};

}  // namespace pstrain::optim
