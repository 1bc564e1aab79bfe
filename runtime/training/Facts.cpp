#include "runtime/training/Facts.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/Text.h"

namespace pstrain::training {

std::string blasOfRanks(const RankFacts& facts) {
  std::vector<std::string> names;
  for (const auto& rank : facts) names.push_back(rank.at("info.blas"));
  const auto groups = groupIndices(names);
  if (groups.size() == 1) return groups.front().first;
  std::string text;
  for (const auto& [name, ranks] : groups) {
    text += fmt::format("{}{} on rank{} {}", text.empty() ? "" : "; ", name, ranks.size() > 1 ? "s" : "",
                        fmt::join(ranks, ", "));
  }
  return text;
}

const std::string& tokenIdsOf(const config::TrainConfig& cfg, const RankFacts& facts) {
  return facts[cfg.modeInfo().peers() ? 0 : 1].at("info.token-ids");
}

std::string hostOf(const std::map<std::string, std::string>& facts) {
  const std::string& addresses = facts.at("info.addresses");
  return facts.at("info.host") + (addresses.empty() ? "" : " (" + addresses + ")");
}

}  // namespace pstrain::training
