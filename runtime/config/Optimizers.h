#pragma once
// The update rules (--optimizer), one row each in one table (Optimizers.cpp): what the
// flags, the fingerprint, the dry run and the checkpoints need to know of a rule. Its update
// itself is a class in runtime/optim, made from the row's name (optim/Optimizer.cpp). A new
// rule is one row here, its class, and one line where optim makes it.
// Torch-free: pstrain-run checks pstrain's flags with it.
#include <string>
#include <vector>

namespace pstrain::config {

struct TrainConfig;

struct OptimizerInfo {
  const char* name;
  const char* help;       // what --help says of it
  bool momentum;          // reads --momentum (and --nesterov)
  bool adaptive;          // reads --betas and --eps
  bool decoupledDecay;    // --weight-decay shrinks the weights (AdamW) instead of adding an L2 term
  // Its state per parameter, by torch.optim's names: the checkpoint's keys under "optimizer".
  std::vector<const char*> state;
  bool countsUpdates;     // keeps a step count (the checkpoint's "step"; Adam's bias correction)
};

// Every rule, in --help's order.
const std::vector<OptimizerInfo>& optimizers();
// The row of `name`; throws ConfigError naming `flag` and listing the names otherwise.
const OptimizerInfo& optimizerInfo(const std::string& name, const std::string& flag = "optimizer");
// "sgd | adam | adamw".
std::string optimizerNames();

// diloco's outer rules (--outer-optimizer): SGD on the averaged pseudo-gradient with
// --outer-momentum, as heavy ball or Nesterov (torch.optim.SGD's nesterov=True).
struct OuterOptimizerInfo {
  const char* name;
  const char* help;
  bool nesterov;
};
const std::vector<OuterOptimizerInfo>& outerOptimizers();
const OuterOptimizerInfo& outerOptimizerInfo(const std::string& name);
// "sgd | nesterov".
std::string outerOptimizerNames();

// Where --weight-decay falls (--weight-decay-scope), one row each. A new rule is a row here
// and the spans optim's factory works out for it (optim/Optimizer.cpp's makeOptimizer).
enum class DecayScope { All, Matrices };
struct DecayScopeInfo {
  const char* name;
  const char* help;    // what --help says of it
  const char* dryRun;  // the dry run's words after "weight decay X" ("" for every tensor)
  DecayScope scope;
};
const std::vector<DecayScopeInfo>& decayScopes();
// The row of `name`; throws ConfigError naming --weight-decay-scope and the names otherwise.
const DecayScopeInfo& decayScopeInfo(const std::string& name);
// "all | matrices" (with withHelp: each row's help after its name).
std::string decayScopeNames(bool withHelp = false);

// The dry run's words for cfg's rule and its hyperparameters: "sgd, momentum 0.9 (Nesterov)",
// "adamw, betas 0.9,0.999, eps 1e-08".
std::string describeOptimizer(const TrainConfig& cfg);

}  // namespace pstrain::config
