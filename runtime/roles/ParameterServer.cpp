#include "runtime/roles/ParameterServer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <map>

#include "data/ShardSampler.h"
#include "runtime/Errors.h"
#include "runtime/optim/LrSchedule.h"
#include "runtime/optim/Sgd.h"
#include "runtime/roles/Balance.h"
#include "runtime/roles/FlatParameters.h"
#include "runtime/roles/Publisher.h"
#include "runtime/roles/StepLink.h"
#include "runtime/roles/StepMessages.h"
#include "runtime/roles/SummedUpdate.h"

namespace pstrain::roles {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// {"key": count, ...} for metrics.jsonl.
template <typename Key>
std::string jsonCounts(const std::map<Key, std::int64_t>& counts) {
  std::string json = "{";
  for (const auto& [key, count] : counts) json += fmt::format("{}\"{}\":{}", json.size() > 1 ? "," : "", key, count);
  return json + "}";
}

// What every server loop works with. The model's parameters are views into the down
// message: no copy before a send.
struct ServerState {
  ServerState(comm::Communicator& comm, const config::TrainConfig& cfg, models::Net& model, std::int64_t trainSamples,
              const checkpoint::Checkpoint* resumeFrom)
      : comm(comm),
        cfg(cfg),
        model(model),
        workers(comm.size() - 1),
        shards(cfg.virtualShards > 0 ? cfg.virtualShards : workers),
        sampler(trainSamples, shards, cfg.batchSize, cfg.seed),
        updatesPerEpoch(cfg.updatesPerEpoch(sampler.stepsPerEpoch(), workers)),
        total(config::totalSteps(cfg, updatesPerEpoch)),
        firstStep(resumeFrom ? resumeFrom->step : 0),
        messages(models::parameterCount(model), bufferCount(model), comm.size()),
        link(comm, cfg, model, messages, cfg.seed),
        sgd({cfg.momentum, cfg.weightDecay, cfg.nesterov}),
        publisher(cfg, model, sgd, updatesPerEpoch, total, firstStep) {
    bindParameters(model, messages.weights);
    readBuffers(model, messages.serverBuffers);
    if (resumeFrom) restoreMomentum(sgd, model, *resumeFrom);
  }

  double lr(std::int64_t step) const {
    return optim::learningRate(cfg, cfg.batchesPerUpdate(shards), step, total);
  }
  void setHeader(std::int64_t step, Control control, double lr = 0) {
    messages.setHeader({step, publisher.epochOf(std::min(step, std::max<std::int64_t>(total - 1, 0))), control,
                        static_cast<float>(lr), 0});
  }
  // Accounting of an update from the summed trailer of `contributors` workers.
  StepStats stats(int contributors) {
    const StepLink::Traffic traffic = link.take();
    StepStats s = summedStats(messages, contributors);
    s.codecSeconds += traffic.codecSeconds;
    s.bytesDown = traffic.bytesDown;
    s.rawBytesDown = traffic.rawBytesDown;
    s.bytesUp = traffic.bytesUp;
    s.rawBytesUp = traffic.rawBytesUp;
    return s;
  }
  const std::string stopContext = "stop";

  comm::Communicator& comm;
  const config::TrainConfig& cfg;
  models::Net& model;
  const int workers;
  const int shards;  // virtual shards of a step's global batch (sync; the workers otherwise)
  const data::ShardSampler sampler;
  const std::int64_t updatesPerEpoch;
  const std::int64_t total;
  const std::int64_t firstStep;
  StepMessages messages;
  StepLink link;
  optim::Sgd sgd;
  Publisher publisher;
};

// Each step: the workers' gradients up, the update, the next step's weights down. With
// overlap, every bucket is updated as soon as it is summed and its weights start down at
// once, while later buckets still travel up.
void runSync(ServerState& s) {
  StepMessages& messages = s.messages;
  const bool overlap = s.cfg.overlapping();
  const auto buckets = gradientBuckets(s.model, s.cfg.bucketKb * 1024);
  const std::int64_t n = messages.weights.numel();
  std::int64_t step = s.firstStep;
  // The header of the next down message: train `step`, or stop.
  auto announce = [&] {
    const bool train = step < s.total && !s.publisher.timeToStop();
    s.setHeader(step, train ? Control::Train : Control::Stop, train ? s.lr(step) : 0);
    return train;
  };
  ShareBalancer balancer(s.comm.size(), s.shards, s.cfg.balance);
  const float* compute = messages.trailer + kComputeSeconds;
  balancer.write(messages.shares.data_ptr<float>());
  if (s.cfg.balance) {
    s.publisher.setExtras([&](metrics::JsonObject& line) {
      line.addRaw("virtual_shards_by_worker", fmt::format("[{}]", fmt::join(balancer.counts(), ",")));
    });
  }
  bool training = announce();
  s.link.broadcastDown(training ? fmt::format("step {}", step) : s.stopContext);
  // A step's period runs from the end of one down message to the end of the next: the span
  // of the workers' batches, so the slowest batch's time can be taken from it.
  auto periodStart = Clock::now();
  double cpuStart = Publisher::processCpuSeconds();
  while (training) {
    currentStep() = step;
    const double lr = s.lr(step);
    const std::string context = fmt::format("step {}", step);
    double updateSeconds = 0, updateCpuSeconds = 0;
    auto timed = [&](auto&& update) {
      auto updateStart = Clock::now();
      const double updateCpuStart = Publisher::processCpuSeconds();
      update();
      updateSeconds += secondsSince(updateStart);
      updateCpuSeconds += Publisher::processCpuSeconds() - updateCpuStart;
    };
    bool applied = true;
    if (overlap) {
      // The step's sample count is known in advance: the shards' batch sizes.
      const double samples = static_cast<double>(s.shards * s.sampler.batchSizeAt(step));
      s.link.reduceUpInBuckets(buckets, [&](const Bucket& b, at::Tensor& grad) {
        timed([&] {
          if (!s.sgd.stepSlice(messages.weights.narrow(0, b.begin, b.end - b.begin), grad, lr, b.begin, n, samples)) {
            throw nonFiniteUpdate(step, s.cfg);
          }
        });
      }, context);
      if (!sameCount(messages.trailer[kSamples], samples)) {
        throw Error(fmt::format("step {}: the workers sent {} samples, their shards hold {}", step,
                                messages.trailer[kSamples], samples));
      }
      timed([&] { averageBuffers(messages, s.shards, s.model); });
    } else {
      s.link.reduceUp(context);
      timed([&] { applied = applySummedUpdate(messages, s.sgd, lr, s.shards, s.model, s.cfg, step); });
    }
    const std::int64_t done = step++;
    // The shares' broadcast starts in finishDown() (overlap): the balance is set before.
    balancer.record(compute);
    balancer.write(messages.shares.data_ptr<float>());
    training = announce();
    const std::string downContext = training ? fmt::format("step {}", step) : s.stopContext;
    if (overlap) {
      s.link.finishDown(downContext);
    } else {
      s.link.broadcastDown(downContext);
    }
    const auto periodEnd = Clock::now();
    const double cpuEnd = Publisher::processCpuSeconds();
    StepStats stats = s.stats(s.workers);
    // With overlap the bucket updates run while later buckets travel, within the exchange;
    // without, the update runs alone and is no part of it.
    stats.exchangeSeconds = std::chrono::duration<double>(periodEnd - periodStart).count() -
                            (overlap ? 0 : updateSeconds);
    stats.exchangeCpuSeconds = cpuEnd - cpuStart - updateCpuSeconds;
    stats.updateSeconds = updateSeconds;
    // After the down message: the workers compute while the server records (and may write
    // a checkpoint), which is part of the next step's period.
    periodStart = periodEnd;
    cpuStart = cpuEnd;
    stats.applied = applied;
    s.publisher.record(done, lr, stats);
  }
  s.publisher.finish(step);
}

// Backup workers (Chen et al. 2016, "Revisiting distributed synchronous SGD").
void runBackup(ServerState& s) {
  StepMessages& messages = s.messages;
  const int k = s.cfg.batchesPerUpdate(s.workers);  // <= workers: checked at start-up
  std::vector<float> incoming(messages.up.size());
  const std::size_t versionAt = static_cast<std::size_t>(messages.trailer - messages.up.data()) + kVersion;
  std::vector<int> waiting;  // workers whose gradient for `step` is in, waiting for the next weights
  std::int64_t dropped = 0, droppedTotal = 0;
  std::map<int, std::int64_t> droppedByRank;
  std::int64_t step = s.firstStep;
  s.setHeader(step, Control::Train, s.lr(step));
  s.link.packDown();
  for (int w = 1; w <= s.workers; ++w) s.link.sendDown(w, "start");
  std::fill(messages.up.begin(), messages.up.end(), 0.0f);
  auto exchangeStart = Clock::now();
  auto extras = [&](metrics::JsonObject& line) {
    line.add("dropped", dropped).add("dropped_total", droppedTotal);
    line.addRaw("dropped_by_rank", jsonCounts(droppedByRank));
    dropped = 0;
  };
  s.publisher.setExtras(extras);
  while (step < s.total && !s.publisher.timeToStop()) {
    currentStep() = step;
    const std::string context = fmt::format("step {}", step);
    const int source = s.link.receiveUp(incoming.data(), context);
    const std::int64_t version = trailerVersion(incoming[versionAt], source);
    if (version != step) {  // computed on older weights: too late
      ++dropped;
      ++droppedTotal;
      ++droppedByRank[source];
      s.link.sendDown(source, context);
      continue;
    }
    for (std::size_t i = 0; i < incoming.size(); ++i) messages.up[i] += incoming[i];
    waiting.push_back(source);
    if (static_cast<int>(waiting.size()) < k) continue;

    const double lr = s.lr(step);
    StepStats stats = s.stats(k);
    stats.exchangeSeconds = secondsSince(exchangeStart);
    auto updateStart = Clock::now();
    stats.applied = applySummedUpdate(messages, s.sgd, lr, k, s.model, s.cfg, step);
    stats.updateSeconds = secondsSince(updateStart);
    s.publisher.record(step, lr, stats);
    ++step;
    exchangeStart = Clock::now();
    s.setHeader(step, Control::Train, s.lr(std::min(step, s.total - 1)));
    s.link.packDown();
    for (int w : waiting) s.link.sendDown(w, context);
    waiting.clear();
    std::fill(messages.up.begin(), messages.up.end(), 0.0f);
  }
  // Every worker is either waiting (its gradient is in) or computing: stop both kinds.
  s.setHeader(step, Control::Stop);
  s.link.packDown();
  for (int w : waiting) s.link.sendDown(w, s.stopContext);
  for (int left = s.workers - static_cast<int>(waiting.size()); left > 0; --left) {
    s.link.sendDown(s.link.receiveUp(incoming.data(), s.stopContext), s.stopContext);
  }
  std::cout << fmt::format("pstrain: backup: {} late gradient(s) dropped", droppedTotal) << std::endl;
  s.publisher.finish(step);
}

// Bounded-staleness asynchronous SGD with stale-gradient rejection.
void runAsync(ServerState& s) {
  StepMessages& messages = s.messages;
  std::int64_t applied = 0, rejected = 0, rejectedTotal = 0;
  std::map<std::int64_t, std::int64_t> staleness;  // over the run: updates behind -> applied gradients
  std::map<int, std::int64_t> rejectedByRank;
  auto extras = [&](metrics::JsonObject& line) {
    line.add("applied", applied).add("rejected", rejected).add("rejected_total", rejectedTotal);
    line.addRaw("staleness_histogram", jsonCounts(staleness));
    line.addRaw("rejected_by_rank", jsonCounts(rejectedByRank));
    applied = rejected = 0;
  };
  s.publisher.setExtras(extras);
  std::int64_t step = s.firstStep;
  s.setHeader(step, Control::Train, s.lr(step));
  s.link.packDown();
  for (int w = 1; w <= s.workers; ++w) s.link.sendDown(w, "start");
  while (step < s.total && !s.publisher.timeToStop()) {
    currentStep() = step;
    const std::string context = fmt::format("step {}", step);
    auto exchangeStart = Clock::now();
    const int source = s.link.receiveUp(messages.up.data(), context);
    const double exchange = secondsSince(exchangeStart);
    const std::int64_t version = trailerVersion(messages.trailer[kVersion], source);
    const std::int64_t behind = step - version;
    if (behind > s.cfg.maxStaleness) {
      ++rejected;
      ++rejectedTotal;
      ++rejectedByRank[source];
      s.setHeader(step, Control::Retry, s.lr(step));
      s.link.packDown();
      s.link.sendDown(source, context);
      continue;
    }
    const double lr = s.lr(step);
    StepStats stats = s.stats(1);
    stats.exchangeSeconds = exchange;
    auto updateStart = Clock::now();
    stats.applied = applySummedUpdate(messages, s.sgd, lr, 1, s.model, s.cfg, step);
    stats.updateSeconds = secondsSince(updateStart);
    ++applied;
    ++staleness[behind];
    s.publisher.record(step, lr, stats);
    ++step;
    s.setHeader(step, Control::Train, s.lr(std::min(step, s.total - 1)));
    s.link.packDown();
    s.link.sendDown(source, context);
  }
  // Every worker is computing a gradient: take each one's and answer Stop.
  s.setHeader(step, Control::Stop);
  s.link.packDown();
  for (int left = s.workers; left > 0; --left) s.link.sendDown(s.link.receiveUp(messages.up.data(), s.stopContext), s.stopContext);
  std::cout << fmt::format("pstrain: async: {} stale gradient(s) rejected", rejectedTotal) << std::endl;
  s.publisher.finish(step);
}

}  // namespace

ParameterServer::ParameterServer(comm::Communicator& comm, const config::TrainConfig& cfg,
                                 models::Net& model, std::int64_t trainSamples,
                                 const checkpoint::Checkpoint* resumeFrom)
    : comm_(comm), cfg_(cfg), model_(model), trainSamples_(trainSamples), resumeFrom_(resumeFrom) {}

void ParameterServer::run() {
  ServerState s(comm_, cfg_, model_, trainSamples_, resumeFrom_);
  if (s.total >= kMaxVersionedSteps && cfg_.mode != "sync") {
    throw ConfigError(fmt::format("--mode {} counts at most {} steps", cfg_.mode, kMaxVersionedSteps - 1));
  }
  std::string modeText = cfg_.mode;
  if (cfg_.mode == "backup") modeText += fmt::format(" (aggregate {} of {})", cfg_.batchesPerUpdate(s.workers), s.workers);
  if (cfg_.mode == "async") modeText += fmt::format(" (max staleness {})", cfg_.maxStaleness);
  std::cout << fmt::format("pstrain: {} mode, {} workers, {} steps ({} per epoch), model {} ({} parameters), "
                           "{} train samples, batch {} per worker{}{}",
                           modeText, s.workers, s.total, s.updatesPerEpoch, cfg_.model, s.messages.weights.numel(),
                           trainSamples_, cfg_.batchSize,
                           s.shards != s.workers ? fmt::format(" and virtual shard ({} virtual shards: {} per step)",
                                                               s.shards, s.shards * cfg_.batchSize) : "",
                           s.firstStep ? fmt::format("; resuming at step {}", s.firstStep) : "")
            << std::endl;
  if (cfg_.mode == "backup") {
    runBackup(s);
  } else if (cfg_.mode == "async") {
    runAsync(s);
  } else {
    runSync(s);
  }
}

}  // namespace pstrain::roles
