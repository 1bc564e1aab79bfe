#pragma once
// Which ranks of a run serve and which compute: its K servers (--servers; ranks 0..K-1, each
// owning a key range of the weights, exchanges/Ranges.h) and the workers after them, or
// peers (allreduce, gossip: every rank computes, none serves). Outside runtime/exchanges/,
// the one place that reads how many servers a run has: the start-up's checks and plan, the
// memory plan, the probe, --doctor and the supervisor ask it. Torch-free.
#include <cstdint>
#include <string>
#include <vector>

namespace pstrain::config {

struct TrainConfig;

class Layout {
 public:
  // The layout of `cfg`'s mode and --servers over `ranks` ranks.
  Layout(const TrainConfig& cfg, int ranks);
  // The layout of `cfg` with `workers` workers (pstrain-run's launches).
  static Layout withWorkers(const TrainConfig& cfg, int workers);

  int ranks() const { return ranks_; }
  int servers() const { return servers_; }            // 0 among peers
  int workers() const { return ranks_ - servers_; }   // the ranks that compute
  bool serves(int rank) const { return rank < servers_; }
  bool computes(int rank) const { return rank >= servers_; }
  int workerIndex(int rank) const { return rank - servers_; }  // among the workers, from 0
  std::vector<int> workerRanks() const;  // K on
  // Whether the weights are cut into K > 1 key ranges, one a server: each server then holds
  // about 1/K of them and wants a host (a link) of its own.
  bool cutsWeights() const { return servers_ > 1; }
  // The parameters `rank` holds of a model of `parameters`: a server its range's (about
  // 1/K, the memory plan's estimate), any other rank all of them.
  std::int64_t heldBy(int rank, std::int64_t parameters) const;
  // "1 parameter server", "2 parameter servers"; "" among peers.
  std::string serverWords() const;
  // Throws CollectiveConfigError (the same on every rank) when the ranks leave no worker to
  // K > 1 servers.
  void check() const;

 private:
  int ranks_, servers_;
};

}  // namespace pstrain::config
