#include "runtime/config/Losses.h"

#include <fmt/format.h>

#include "runtime/Errors.h"
#include "runtime/config/Switch.h"

namespace pstrain::config {

const std::vector<LossInfo>& losses() {
  static const std::vector<LossInfo> table = {
      {"cross-entropy", LossKind::CrossEntropy, "on logits", true, true},
      {"nll", LossKind::Nll, "on log-probabilities", true, true},
      {"mse", LossKind::Mse, "float targets", false, false},
      {kModelLoss, LossKind::Model, "the model's own: its forward(x, y) returns it", false, false, true},
  };
  return table;
}

std::string lossNames(bool withHelp) {
  std::string names;
  for (const auto& row : losses()) {
    names += (names.empty() ? "" : " | ") + std::string(row.name) + (withHelp ? fmt::format(" ({})", row.help) : "");
  }
  return names;
}


bool isModelLoss(const std::string& loss) { return loss == kModelLoss; }

const LossInfo& lossInfo(const std::string& name) {
  for (const auto& row : losses()) {
    if (name == row.name) return row;
  }
  throw ConfigError(fmt::format("--loss '{}' is not one of: auto | {}", name, lossNames()));
}

}  // namespace pstrain::config
