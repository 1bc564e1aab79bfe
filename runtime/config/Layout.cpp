#include "runtime/config/Layout.h"

#include <fmt/format.h>

#include "runtime/Errors.h"
#include "runtime/config/TrainConfig.h"

namespace pstrain::config {

Layout::Layout(const TrainConfig& cfg, int ranks) : ranks_(ranks), servers_(cfg.modeInfo().peers() ? 0 : cfg.servers) {}

Layout Layout::withWorkers(const TrainConfig& cfg, int workers) {
  Layout layout(cfg, 0);
  layout.ranks_ = layout.servers_ + workers;
  return layout;
}

std::int64_t Layout::heldBy(int rank, std::int64_t parameters) const {
  return serves(rank) ? (parameters + servers_ - 1) / servers_ : parameters;
}

std::vector<int> Layout::workerRanks() const {
  std::vector<int> ranks;
  for (int rank = servers_; rank < ranks_; ++rank) ranks.push_back(rank);
  return ranks;
}

std::string Layout::serverWords() const {
  return servers_ == 0 ? "" : fmt::format("{} parameter server{}", servers_, servers_ > 1 ? "s" : "");
}

void Layout::check() const {
  if (!cutsWeights() || servers_ < ranks_) return;
  throw CollectiveConfigError(fmt::format("--servers {} leaves no worker among {} rank(s): ranks 0..{} are the servers; "
                                          "start at least {} ranks (mpirun -np {} for 2 workers), or lower --servers",
                                          servers_, ranks_, servers_ - 1, servers_ + 1, servers_ + 2));
}

}  // namespace pstrain::config
