#include "runtime/training/Checks.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "data/ShardSampler.h"
#include "runtime/Blas.h"
#include "runtime/Errors.h"
#include "runtime/config/Devices.h"
#include "runtime/config/Layout.h"

namespace pstrain::training {

void checkWorld(const config::TrainConfig& cfg, int size) {
  const config::ModeInfo& mode = cfg.modeInfo();
  if (mode.exchange == config::Exchange::Gossip && size < 2) {
    throw CollectiveConfigError(fmt::format("{} averages with peers: start 2 or more ranks (mpirun -np 2 ...)", mode.name));
  }
  if (!mode.peers() && size < 2) {
    throw CollectiveConfigError(fmt::format(
        "--mode {} needs a parameter server and at least one worker: start 2 or more ranks "
        "(mpirun -np 3 ... for 2 workers), or use --mode allreduce on one rank", mode.name));
  }
  const config::Layout layout(cfg, size);
  layout.check();
  if (mode.quorum == config::Quorum::Aggregate && cfg.aggregate > layout.workers()) {
    throw CollectiveConfigError(fmt::format("--aggregate {} is more than the {} worker(s) of {} ranks with {}: each "
                                            "update would wait for gradients that never come", cfg.aggregate,
                                            layout.workers(), size, layout.serverWords()));
  }
  // The testing flags name a rank that computes, or they would do nothing without a word.
  for (const auto& [flag, text, injection] : {std::tuple{"inject-nan", cfg.injectNan, cfg.nanInjection()},
                                               std::tuple{"inject-overflow", cfg.injectOverflow, cfg.overflowInjection()}}) {
    if (!text.empty() && (injection.rank >= size || !layout.computes(injection.rank))) {
      const std::vector<int> workers = layout.workerRanks();
      throw CollectiveConfigError(fmt::format("--{} {}: rank {} computes no gradients here (ranks {}..{} do)", flag, text,
                                              injection.rank, workers.front(), workers.back()));
    }
  }
}

void checkServerHosts(const config::TrainConfig& cfg, const RankFacts& facts) {
  const config::Layout layout(cfg, static_cast<int>(facts.size()));
  if (!layout.cutsWeights() || cfg.stackServers) return;
  std::map<std::string, std::vector<int>> serversOn;
  for (const auto& rank : facts) serversOn[hostOf(rank)];
  for (int r = 0; r < layout.servers(); ++r) serversOn[hostOf(facts[r])].push_back(r);
  std::string crowded, empty;
  for (const auto& [host, ranks] : serversOn) {
    if (ranks.size() > 1 && crowded.empty()) crowded = fmt::format("ranks {} on {}", fmt::join(ranks, ", "), host);
    if (ranks.empty() && empty.empty()) empty = host;
  }
  if (crowded.empty() || empty.empty()) return;
  throw CollectiveConfigError(fmt::format(
      "--servers {}: servers {} share one link while host {} has no server; place one rank per host first "
      "(mpirun --map-by node), or allow it with --stack-servers", layout.servers(), crowded, empty));
}

void checkBatchFitsShards(const config::RunPlan& run, std::int64_t trainSamples) {
  if (run.blockSize > 0) return;
  const data::ShardSampler sampler(trainSamples, run.resolvedShards, run.shardBatch(), run.seed, run.blockSize);
  if (sampler.shardSize() >= run.shardBatch()) return;
  const std::string batch = run.gradAccum == 1 ? fmt::format("--batch-size {}", run.batchSize)
                                                : fmt::format("a batch of {}", run.describeBatch());
  throw CollectiveConfigError(fmt::format(
      "{} is more than the {} sample(s) of each of the {} virtual shard(s) of the {} training samples: a batch would "
      "hold samples twice; lower --batch-size{}{}", batch, sampler.shardSize(), run.resolvedShards, trainSamples,
      run.gradAccum > 1 ? " or --grad-accum" : "", run.resolvedShards > 1 ? " or the shards (--virtual-shards, workers)" : ""));
}

void warnOfReferenceBlas(const config::TrainConfig& cfg, const RankFacts& facts) {
  std::vector<std::string> slow;
  const config::Layout layout(cfg, static_cast<int>(facts.size()));
  for (std::size_t r = 0; r < facts.size(); ++r) {
    const bool computes = layout.computes(static_cast<int>(r));
    if (computes && facts[r].at("info.blas-reference") == "1" && config::deviceKindOf(facts[r].at("info.device")) == config::DeviceKind::Cpu) {
      slow.push_back(fmt::format("{} ({})", r, facts[r].at("info.host")));
    }
  }
  if (slow.empty()) return;
  std::cout << fmt::format("pstrain: warning: rank{} {} compute{} on the reference BLAS (netlib), about 3 times slower "
                           "than OpenBLAS on a CPU step; on {}: {}",
                           slow.size() > 1 ? "s" : "", fmt::join(slow, ", "), slow.size() > 1 ? "" : "s",
                           slow.size() > 1 ? "each of those hosts" : "that host", blasFixCommand())
            << std::endl;
}

}  // namespace pstrain::training
