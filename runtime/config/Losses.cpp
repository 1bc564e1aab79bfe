#include "runtime/config/Losses.h"

#include <fmt/format.h>

#include "runtime/Errors.h"

namespace pstrain::config {

const std::vector<LossInfo>& losses() {
  static const std::vector<LossInfo> table = {
      {"cross-entropy", "on logits", true, true},
      {"nll", "on log-probabilities", true, true},
      {"mse", "float targets", false, false},
      {kModelLoss, "the model's own: its forward(x, y) returns it", false, false, true},
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

const LossInfo& lossInfo(const std::string& name) {
  for (const auto& row : losses()) {
    if (name == row.name) return row;
  }
  throw ConfigError(fmt::format("--loss '{}' is not one of: auto | {}", name, lossNames()));
}

}  // namespace pstrain::config
