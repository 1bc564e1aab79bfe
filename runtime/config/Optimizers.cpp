#include "runtime/config/Optimizers.h"

#include <fmt/format.h>

#include "runtime/Errors.h"
#include "runtime/config/Table.h"
#include "runtime/config/TrainConfig.h"

namespace pstrain::config {

const std::vector<OptimizerInfo>& optimizers() {
  // clang-format off
  static const std::vector<OptimizerInfo> table = {
      {"sgd", "torch.optim.SGD: --momentum (heavy ball, or --nesterov), --weight-decay as an L2 term",
       true, false, false, {"momentum_buffer"}, false},
      {"adam", "torch.optim.Adam: --betas, --eps, --weight-decay as an L2 term",
       false, true, false, {"exp_avg", "exp_avg_sq"}, true},
      {"adamw", "torch.optim.AdamW: --betas, --eps, --weight-decay decoupled (the weights shrink by lr x decay)",
       false, true, true, {"exp_avg", "exp_avg_sq"}, true},
  };
  // clang-format on
  return table;
}

std::string optimizerNames() { return namesOf(optimizers()); }

const OptimizerInfo& optimizerInfo(const std::string& name, const std::string& flag) {
  return rowNamed(optimizers(), name, flag);
}

const std::vector<OuterOptimizerInfo>& outerOptimizers() {
  static const std::vector<OuterOptimizerInfo> table = {
      {"sgd", "torch.optim.SGD with --outer-momentum (heavy ball)", false},
      {"nesterov", "torch.optim.SGD with --outer-momentum, nesterov=True (DiLoCo's)", true},
  };
  return table;
}

const OuterOptimizerInfo& outerOptimizerInfo(const std::string& name) {
  return rowNamed(outerOptimizers(), name, "outer-optimizer");
}

std::string outerOptimizerNames() { return namesOf(outerOptimizers()); }

const std::vector<DecayScopeInfo>& decayScopes() {
  static const std::vector<DecayScopeInfo> table = {
      {"all", "every tensor (torch.optim's rule)", "", DecayScope::All},
      {"matrices", "the tensors of two dimensions or more, not biases nor norms (nanoGPT's parameter groups, timm, "
                   "Hugging Face's Trainer)", " (on tensors of 2+ dimensions only)", DecayScope::Matrices},
  };
  return table;
}

const DecayScopeInfo& decayScopeInfo(const std::string& name) { return rowNamed(decayScopes(), name, "weight-decay-scope"); }

std::string decayScopeNames(bool withHelp) {
  if (!withHelp) return namesOf(decayScopes());
  std::string text;
  for (const DecayScopeInfo& row : decayScopes()) text += fmt::format("{}{}: {}", text.empty() ? "" : "; ", row.name, row.help);
  return text;
}

std::string describeOptimizer(const TrainConfig& cfg) {
  const OptimizerInfo& row = optimizerInfo(cfg.optimizer);
  std::string text = row.name;
  if (row.momentum) text += fmt::format(", momentum {}{}", cfg.momentum, cfg.nesterov ? " (Nesterov)" : "");
  if (row.adaptive) text += fmt::format(", betas {}, eps {}", cfg.betas, cfg.eps);
  return text;
}

}  // namespace pstrain::config
