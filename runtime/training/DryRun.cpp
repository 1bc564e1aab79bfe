#include "runtime/training/DryRun.h"

#include <fmt/format.h>

#include <iostream>

#include "data/ShardSampler.h"
#include "runtime/config/Devices.h"
#include "runtime/config/Layout.h"
#include "runtime/config/Losses.h"
#include "runtime/config/Optimizers.h"
#include "runtime/optim/LossScale.h"
#include "runtime/optim/LrSchedule.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/protocol/StepProtocol.h"
#include "runtime/training/Exchanges.h"

namespace pstrain::training {

using namespace protocol;
namespace {

// The dry run's "ckpt" line: the periodic checkpoints (at the end of the exchange's round that
// passes each multiple of --checkpoint-every, a round being `round` steps), the first four
// named, and the final one.
std::string checkpointPlan(const config::TrainConfig& cfg, std::int64_t total, std::int64_t round) {
  const std::int64_t every = cfg.checkpointEvery;
  std::string schedule;
  std::int64_t count = 0, last = 0;
  for (std::int64_t s = every; every > 0 && s < total; s += every) {
    const std::int64_t at = (s + round - 1) / round * round;
    if (at >= total || at == last) continue;
    last = at;
    if (++count <= 4) schedule += fmt::format("{} ", at);
  }
  if (count > 4) schedule += "... ";
  return fmt::format("  ckpt      {} checkpoint(s) into {}/ckpt: steps {}{}final {}\n", count + 1, cfg.trainDir, schedule,
                     schedule.empty() ? "" : "and ", total);
}

// The dry run's "model" line: its trained parameters (and frozen ones, ties), their size,
// and how the workers hold them.
std::string modelPlan(const config::TrainConfig& cfg, const models::Net& model) {
  const config::PrecisionInfo& precision = config::precisionInfo(cfg.precision);
  const std::int64_t frozen = models::frozenCount(model);
  return fmt::format("  model     {}: {} ({:.2f} MiB as float32{}){}\n", cfg.model, models::describeParameters(model),
                     models::parameterCount(model) * 4.0 / (1 << 20),
                     frozen > 0 ? fmt::format(" trained, exchanged; the frozen {:.2f} MiB held by every rank from its "
                                              "file, never sent", frozen * 4.0 / (1 << 20)) : "",
                     precision.bf16Weights ? "; the workers hold them in bfloat16 (forward pass autocast to bf16), the "
                                             "servers float32 master weights"
                     : precision.autocasts ? fmt::format("; forward pass autocast to {}", cfg.precision) : "");
}

// The dry run's "loss" line: --loss's row, or the model's own (its forward's signature).
std::string lossPlan(const config::RunPlan& cfg, const models::Net& model) {
  const std::string loss = cfg.lossFunction();
  return config::lossInfo(loss).own ? fmt::format("  loss      the model's own: its {}\n", model.forwardSignature())
                                    : fmt::format("  loss      {} ({})\n", loss, config::lossInfo(loss).help);
}

}  // namespace

void printPlan(const config::RunPlan& cfg, const RankFacts& facts, std::int64_t trainSamples,
               const models::Net& model, const std::string& trainDirState, const std::string& memory) {
  const std::int64_t parameters = models::parameterCount(model);
  const std::int64_t buffers = bufferCount(model);
  const int ranks = static_cast<int>(facts.size());
  const config::ModeInfo& mode = cfg.modeInfo();
  const config::Layout layout(cfg, ranks);
  const int workers = layout.workers();
  const bool peers = mode.peers();
  const int shards = cfg.resolvedShards;
  const data::ShardSampler sampler(trainSamples, shards, cfg.shardBatch(), cfg.seed, cfg.blockSize);
  const std::int64_t updatesPerEpoch = cfg.updatesPerEpoch(sampler.stepsPerEpoch(), workers);
  const std::int64_t total = config::totalSteps(cfg, updatesPerEpoch);
  std::string out = "pstrain dry run: every rank checked its config, data, model and device; nothing trained.\n";
  out += peers ? fmt::format("  world     {} ranks, all computing ({} mode; rank 0 also writes the run's files)\n",
                             ranks, mode.name)
               : fmt::format("  world     {} ranks: {} + {} worker(s) ({} mode)\n", ranks, layout.serverWords(), workers,
                             mode.name);
  const bool tokens = cfg.blockSize > 0;
  for (int r = 0; r < ranks; ++r) {
    const bool computes = layout.computes(r);
    const int index = layout.workerIndex(r);
    const std::size_t mine = computes ? data::virtualShardsOf(index, workers, shards).size() : 0;
    const std::string unit = tokens ? "windows per epoch" : "samples";
    out += fmt::format("  rank {:<4} {:<7} host {:<16} device {:<8} threads {:<3}{}\n", r,
                       peers ? "peer" : (computes ? "worker" : "server"), facts[r].at("info.host"),
                       facts[r].at("info.device"), facts[r].at("info.threads"),
                       !computes ? std::string()
                       : shards == workers ? fmt::format(" shard {} {}", sampler.shardSize(), unit)
                                           : fmt::format(" {} virtual shard(s) of {} {}", mine, sampler.shardSize(), unit));
  }
  out += fmt::format("  blas      {}\n", blasOfRanks(facts));
  const config::PrecisionInfo& precision = config::precisionInfo(cfg.precision);
  out += modelPlan(cfg, model);
  const int perUpdate = cfg.batchesPerUpdate(shards);
  const std::string& ids = tokenIdsOf(cfg, facts);
  out += fmt::format("  data      {}: {}{}; batch {} per worker, {} per update{}\n", cfg.dataset,
                     cfg.describeTrainSet(trainSamples) + (ids.empty() ? "" : fmt::format(", {} ids", ids)),
                     tokens ? ", each window at a random offset" : "",
                     cfg.describeBatch(), cfg.shardBatch() * perUpdate,
                     tokens ? fmt::format(" ({} tokens)", cfg.shardBatch() * perUpdate * cfg.blockSize) : "");
  out += lossPlan(cfg, model);
  out += fmt::format("  steps     {} updates ({} per epoch{})\n", total, updatesPerEpoch,
                     cfg.steps > 0 ? "; --steps" : fmt::format(" x {} epochs", cfg.epochs));
  const double target = optim::learningRate(cfg, perUpdate, cfg.warmupSteps, total + cfg.warmupSteps + 1);
  std::string rule = config::describeOptimizer(cfg);
  rule += fmt::format(", weight decay {}{}{}{}", cfg.weightDecay,
                      cfg.weightDecay > 0 ? config::decayScopeInfo(cfg.weightDecayScope).dryRun : "",
                      cfg.clipGradNorm > 0 ? fmt::format(", gradient norm clipped to {}", cfg.clipGradNorm) : "",
                      cfg.lossScaling() ? fmt::format(", dynamic loss scale from {:g} (doubled after {} good updates, "
                                                      "halved on an overflow, whose update is skipped)",
                                                      optim::LossScale::kInitialScale, cfg.lossScaleWindow)
                                        : "");
  out += fmt::format("  lr        {:.4g}{}{}{}; {}\n", target,
                     cfg.linearLrScaling() ? fmt::format(" (base {:.4g} x {} batches per update)", cfg.lr, perUpdate) : "",
                     cfg.warmupSteps > 0 ? fmt::format(", warm-up from {:.4g} over {} steps",
                                                       optim::learningRate(cfg, perUpdate, 0, total), cfg.warmupSteps)
                                         : "",
                     cfg.cosineLrDecay() ? ", then cosine to 0" : ", then constant", rule);
  out += fmt::format("  per step  server -> each worker {} bytes (weights{} + header); each worker -> server {} bytes (gradient{} + accounting)\n",
                     downBytes(parameters, buffers, ranks, precision.bf16Weights), buffers ? " + BatchNorm buffers" : "",
                     upBytes(parameters, buffers, ranks), buffers ? " + buffers" : "");
  const exchanges::Exchange& ours = training::exchangeFor(cfg);
  const exchanges::PlanText own =
      ours.plan ? ours.plan({cfg, model, total, downBytes(parameters, buffers, ranks), upBytes(parameters, buffers, ranks)})
                : exchanges::PlanText{};
  std::string exchange = own.modeWords.empty() ? mode.plan : own.modeWords;
  if (cfg.compressesGradients() || cfg.compressesWeights()) {
    const bool feedback = config::errorFeedbackOn(cfg.errorFeedback, cfg.gradientCodec());
    exchange += fmt::format("; gradients {}{}, weights {}", cfg.gradientCodec(), feedback ? " with error feedback" : "",
                            cfg.weightCodec());
  }
  out += fmt::format("  exchange  {}{}\n{}", exchange, own.sameLine, own.lines);
  out += checkpointPlan(cfg, total, own.checkpointRound);
  out += memory;
  out += fmt::format("  train dir {}: {}\n", cfg.trainDir, trainDirState);
  std::cout << out << std::flush;
}

}  // namespace pstrain::training
