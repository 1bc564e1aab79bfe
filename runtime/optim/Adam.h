#pragma once
// Adam and AdamW on one flat parameter buffer, with exactly the semantics of torch.optim.Adam
// (weight decay as an L2 term added to the gradient) and torch.optim.AdamW (decoupled:
// the weights shrink by lr x weight decay before the step); no amsgrad. The state is
// torch.optim's: exp_avg, exp_avg_sq and the step, counted per update.
#include <ATen/core/Tensor.h>

#include "runtime/optim/Optimizer.h"

namespace pstrain::optim {

struct AdamOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weightDecay = 0;
  bool decoupled = false;  // AdamW
};

class Adam : public Optimizer {
 public:
  explicit Adam(AdamOptions options);


 protected:
  bool stepRun(at::Tensor params, at::Tensor grad, double lr, std::int64_t offset, std::int64_t total,
               double gradDivisor, bool decay) override;

 private:
  AdamOptions options_;
};

}  // namespace pstrain::optim
