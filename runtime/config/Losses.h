#pragma once
// The training losses (--loss), one row each in one table (Losses.cpp): the targets and the
// model output each takes. The function itself is in runtime/loss (Loss.cpp), found by the
// row's name. --loss auto is not a row: it resolves to one (RunPlan::lossFunction).
// Torch-free.
#include <string>
#include <vector>

namespace pstrain::config {

// Which function computes a row (loss/Loss.cpp switches on it).
enum class LossKind { CrossEntropy, Nll, Mse, Model };

struct LossInfo {
  const char* name;
  LossKind kind;
  const char* help;   // what the model's output is to it, for --help
  bool classTargets;  // integer class labels (one per sample or per position); else float targets
  bool zooOutputs;    // fits the zoo's models, whose outputs are class log-probabilities
  bool own = false;   // the model's own (kModelLoss): its forward(x, y) returns it, whatever the targets
};

// The row of a model's own loss: --loss model, and what --loss auto resolves to for a model
// whose forward takes the targets (loss::lossForModel).
constexpr const char* kModelLoss = "model";

// Every loss, in --help's order.
const std::vector<LossInfo>& losses();
// The row of `name` ("auto" is not one); throws ConfigError naming --loss and the names otherwise.
const LossInfo& lossInfo(const std::string& name);
// Whether --loss `loss` is the model's own (kModelLoss); "auto" is not.
bool isModelLoss(const std::string& loss);

// "cross-entropy | nll | mse"; the same with each one's help: "cross-entropy (on logits) | ...".
std::string lossNames(bool withHelp = false);

}  // namespace pstrain::config
