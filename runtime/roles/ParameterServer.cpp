#include "runtime/roles/ParameterServer.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <vector>

#include "runtime/Errors.h"
#include "runtime/Stop.h"
#include "runtime/metrics/Clock.h"
#include "runtime/optim/LrSchedule.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/roles/Balance.h"
#include "runtime/roles/UpdateState.h"

namespace pstrain::roles {
namespace {

using namespace protocol;
using metrics::Clock;
using metrics::secondsSince;

// The server's state: the model's parameters are views into the down message, so nothing
// is copied before a send.
struct Server : UpdateState {
  explicit Server(const RoleArgs& a)
      : UpdateState(a.comm, a.cfg, a.model, a.trainSamples, a.resume ? a.resume->step : 0, c10::kCPU, a.cfg.seed) {
    bindParameters(model, messages.weights);
    readBuffers(model, messages.serverBuffers);
    if (a.resume) restoreUpdate(*this, *a.resume);
  }
  void setHeader(std::int64_t step, Control control, double lr = 0) {
    messages.setHeader({step, publisher->epochOf(std::min(step, std::max<std::int64_t>(total - 1, 0))), control,
                        static_cast<float>(lr), static_cast<float>(update.lossScale()), 0});
  }
  const std::string stopContext = "stop";
};

// Wall and CPU seconds of the update's parts within a step.
struct UpdateTime {
  double seconds = 0, cpuSeconds = 0;
  template <typename F>
  void add(F&& part) {
    const auto start = Clock::now();
    const double cpuStart = metrics::processCpuSeconds();
    part();
    seconds += secondsSince(start);
    cpuSeconds += metrics::processCpuSeconds() - cpuStart;
  }
};

// A collective loop's period: from the end of one down message to the end of the next, the
// span of the workers' batches (or rounds), so that the slowest one's time can be taken from
// it. After a down message the workers compute while the server records (and may write a
// checkpoint), which is part of the next period.
struct Period {
  Clock::time_point start = Clock::now();
  double cpuStart = metrics::processCpuSeconds();

  // The accounting of the period that ends now, summed over `contributors`; the next one
  // begins. The update's time is apart from the exchange's unless it ran within it
  // (`updateWithin`: overlap's bucket updates run while later buckets travel).
  StepStats close(Server& s, int contributors, const UpdateTime& update, bool updateWithin, bool applied) {
    const auto end = Clock::now();
    const double cpuEnd = metrics::processCpuSeconds();
    StepStats stats = s.stats(contributors);
    stats.exchangeSeconds = std::chrono::duration<double>(end - start).count() - (updateWithin ? 0 : update.seconds);
    stats.exchangeCpuSeconds = cpuEnd - cpuStart - update.cpuSeconds;
    stats.updateSeconds = update.seconds;
    stats.applied = applied;
    start = end;
    cpuStart = cpuEnd;
    return stats;
  }
};

// A sync step's gradients up and its update: the whole up message, then the update; or,
// with overlap, each bucket's update as soon as it is summed (its weights then start down
// while later buckets still travel up). Returns whether the update was applied.
bool reduceAndUpdate(Server& s, const std::vector<Bucket>& buckets, std::int64_t step, double lr, UpdateTime& time) {
  const std::string context = fmt::format("step {}", step);
  if (!s.cfg.overlapping()) {
    s.link.reduceUp(context);
    bool applied = false;
    time.add([&] { applied = s.update.apply(lr, s.shards, step); });
    return applied;
  }
  // The step's sample count is known in advance: the shards' batch sizes.
  const double samples = static_cast<double>(s.shards * s.sampler.batchSizeAt(step));
  s.link.reduceUpInBuckets(buckets, [&](const Bucket& b, at::Tensor& grad) {
    time.add([&] { s.update.applyBucket(b, grad, lr, samples, step); });
  }, context);
  time.add([&] { s.update.finish(samples, s.shards, step); });
  return true;
}

// Collective exchange: each step the workers' gradients up, the update, the next step's
// weights down.
void runCollective(Server& s) {
  const bool overlap = s.cfg.overlapping();
  const auto buckets = gradientBuckets(s.model, s.cfg.bucketKb * 1024);
  std::int64_t step = s.firstStep;
  // The header of the next down message: train `step`, or stop.
  auto announce = [&] {
    const bool train = step < s.total && !s.publisher->timeToStop();
    s.setHeader(step, train ? Control::Train : Control::Stop, train ? s.lr(step) : 0);
    return train;
  };
  auto contextOf = [&](bool train) { return train ? fmt::format("step {}", step) : s.stopContext; };
  ShareBalancer balancer(s.comm.size(), s.shards, s.cfg.balance);
  balancer.write(s.messages.shares.data_ptr<float>());
  if (s.cfg.balance) {
    s.publisher->setExtras([&](metrics::JsonObject& line) {
      line.addRaw("virtual_shards_by_worker", metrics::jsonArray(balancer.counts()));
    });
  }
  bool training = announce();
  s.link.broadcastDown(contextOf(training));
  Period period;
  while (training) {
    currentStep() = step;
    const double lr = s.lr(step);
    UpdateTime update;
    const bool applied = reduceAndUpdate(s, buckets, step, lr, update);
    const std::int64_t done = step++;
    // The shares' broadcast starts in finishDown() (overlap): the balance is set before.
    balancer.record(s.messages.trailer + kComputeSeconds);
    balancer.write(s.messages.shares.data_ptr<float>());
    training = announce();
    if (overlap) {
      s.link.finishDown(contextOf(training));
    } else {
      s.link.broadcastDown(contextOf(training));
    }
    StepStats stats = period.close(s, s.computing, update, overlap, applied);
    stats.gradNorm = s.update.gradNorm();
    s.publisher->record(done, lr, stats);
  }
  s.publisher->finish(step);
}

// What the rounds loop reports per metrics line beyond the per-step figures: the rounds, the
// mean L2 norm of the averaged pseudo-gradient, one round's message sizes, the share of the
// wall time spent communicating (the rounds' periods less their slowest worker's compute),
// the outer lr, and the local steps each worker was dealt.
struct RoundCounts {
  double outerLr = 0;
  std::int64_t rounds = 0, roundsInLine = 0;
  double deltaNormSum = 0, commSeconds = 0, wallSeconds = 0, bytesDown = 0, bytesUp = 0;
  std::vector<int> localSteps;

  void add(const StepStats& stats, double deltaNorm) {
    ++rounds;
    ++roundsInLine;
    deltaNormSum += deltaNorm;
    commSeconds += std::max(0.0, stats.exchangeSeconds - stats.slowestComputeSeconds);
    wallSeconds += stats.exchangeSeconds + stats.updateSeconds;
    bytesDown = stats.bytesDown;
    bytesUp = stats.bytesUp;
  }
  void addTo(metrics::JsonObject& line) {
    line.add("rounds", rounds).add("outer_lr", outerLr);
    line.add("delta_norm", roundsInLine ? deltaNormSum / static_cast<double>(roundsInLine) : 0.0);
    line.add("comm_share", wallSeconds > 0 ? commSeconds / wallSeconds : 0.0);
    line.add("round_bytes_sent", static_cast<std::int64_t>(bytesDown));
    line.add("round_bytes_received", static_cast<std::int64_t>(bytesUp));
    line.addRaw("local_steps_by_worker", metrics::jsonArray(localSteps));
    roundsInLine = 0;
    deltaNormSum = commSeconds = wallSeconds = 0;
  }
};

// Local rounds (diloco): each round the global weights go down with each worker's local
// steps (the shares; --balance deals them by speed), every worker trains alone that long
// and sends its pseudo-gradient (global - local, times its samples) up to be summed like a
// gradient, and the outer rule (UpdateState::rule) steps the global weights with the mean.
// A round of H local steps on each of W workers is H steps of the run: as many samples as H
// sync steps. The last round may be shorter; it is dealt evenly.
void runRounds(Server& s) {
  const std::int64_t H = s.cfg.localSteps;
  const int workers = s.computing;
  ShareBalancer balancer(s.comm.size(), static_cast<int>(std::min<std::int64_t>(H * workers, 1 << 30)), s.cfg.balance,
                         /*rebalanceEvery=*/1);
  RoundCounts counts;
  counts.outerLr = s.lr(0);
  s.publisher->setExtras([&](metrics::JsonObject& line) { counts.addTo(line); });
  std::int64_t step = s.firstStep;
  auto innerLr = [&](std::int64_t at) {
    return optim::learningRate(s.cfg, s.cfg.batchesPerUpdate(s.shards), std::min(at, s.total - 1), s.total);
  };
  // The header and shares of the next round (or the stop): its first step, its inner lr,
  // each worker's local steps.
  auto announce = [&] {
    const bool train = step < s.total && !s.publisher->timeToStop();
    s.setHeader(step, train ? Control::Train : Control::Stop, train ? innerLr(step) : 0);
    const std::int64_t length = std::min(H, s.total - step);
    balancer.write(s.messages.shares.data_ptr<float>());
    if (length > 0 && length < H) std::fill_n(s.messages.shares.data_ptr<float>() + 1, workers, static_cast<float>(length));
    counts.localSteps.assign(s.messages.shares.data_ptr<float>() + 1, s.messages.shares.data_ptr<float>() + 1 + workers);
    return train;
  };
  auto contextOf = [&](bool train) { return train ? fmt::format("round at step {}", step) : s.stopContext; };
  bool training = announce();
  s.link.broadcastDown(contextOf(training));
  Period period;
  bool warnedOfTimeout = false;
  while (training) {
    currentStep() = step;
    const std::int64_t length = std::min(H, s.total - step);
    s.link.reduceUp(contextOf(true));
    UpdateTime update;
    bool applied = false;
    update.add([&] { applied = s.update.apply(s.lr(step), workers, step); });
    const std::int64_t first = step;
    step += length;
    if (length == H) balancer.record(s.messages.trailer + kComputeSeconds);
    training = announce();
    s.link.broadcastDown(contextOf(training));
    const StepStats stats = period.close(s, workers, update, /*updateWithin=*/false, applied);
    counts.add(stats, s.update.gradNorm());
    // Every rank waits a round for the slowest worker: --timeout must outlast one.
    if (!warnedOfTimeout && stats.slowestComputeSeconds > s.cfg.timeoutSeconds / 2) {
      warnedOfTimeout = true;
      std::cout << fmt::format("pstrain: warning: a round of {} local steps took {:.1f} s, --timeout is {} s: raise "
                               "--timeout above a round, or lower --local-steps", length, stats.slowestComputeSeconds,
                               s.cfg.timeoutSeconds) << std::endl;
    }
    s.publisher->record(step - 1, innerLr(first), stats, length);
  }
  s.publisher->finish(step);
}

// What the point-to-point loop counts of stale gradients, in the words of the mode's
// policy: backup drops late ones, async rejects (and has recomputed) too stale ones.
struct StaleCounts {
  explicit StaleCounts(const config::StalePolicy& policy) : policy(policy) {}
  config::StalePolicy policy;
  std::int64_t accepted = 0, stale = 0, staleTotal = 0;  // accepted and stale: since the last metrics line
  std::map<int, std::int64_t> staleByRank;
  std::map<std::int64_t, std::int64_t> staleness;  // over the run: updates behind -> accepted gradients

  void addTo(metrics::JsonObject& line) {
    if (policy == config::StalePolicy::Drop) {
      line.add("dropped", stale).add("dropped_total", staleTotal);
      line.addRaw("dropped_by_rank", metrics::jsonCounts(staleByRank));
    } else {
      line.add("applied", accepted).add("rejected", stale).add("rejected_total", staleTotal);
      line.addRaw("staleness_histogram", metrics::jsonCounts(staleness));
      line.addRaw("rejected_by_rank", metrics::jsonCounts(staleByRank));
    }
    accepted = stale = 0;
  }
  std::string summary(const char* mode) const {
    return policy == config::StalePolicy::Drop
               ? fmt::format("pstrain: {}: {} late gradient(s) dropped", mode, staleTotal)
               : fmt::format("pstrain: {}: {} stale gradient(s) rejected", mode, staleTotal);
  }
};

// Point-to-point exchange, one loop for its policies (Mode.h): a gradient computed on weights
// `behind` updates old is accepted if behind <= the limit (backup: 0, the step's own
// weights; async: --max-staleness), and an update takes the quorum of accepted gradients
// (backup: --aggregate K, Chen et al. 2016; async: 1). A stale gradient is dropped and its
// worker gets the newest weights (Drop), or its worker computes the same batch again on
// them (RetryAfter: Control::Retry). Workers whose gradient went into an update wait for
// its weights.
void runPointToPoint(Server& s) {
  const config::ModeInfo& mode = s.cfg.modeInfo();
  const int quorum = s.cfg.batchesPerUpdate(s.computing);  // <= workers: checked at start-up
  const std::int64_t limit = mode.stale == config::StalePolicy::RetryAfter ? s.cfg.maxStaleness : 0;
  StepMessages& messages = s.messages;
  std::vector<float> incoming(messages.up.size());
  const std::size_t versionAt = static_cast<std::size_t>(messages.trailer - messages.up.data()) + kVersion;
  std::vector<int> waiting;  // workers whose gradient is in the coming update
  StaleCounts counts{mode.stale};
  s.publisher->setExtras([&](metrics::JsonObject& line) { counts.addTo(line); });
  std::int64_t step = s.firstStep;
  s.setHeader(step, Control::Train, s.lr(step));
  s.link.packDown();
  for (int w = 1; w <= s.computing; ++w) s.link.sendDown(w, "start");
  auto exchangeStart = Clock::now();
  while (step < s.total && !s.publisher->timeToStop()) {
    currentStep() = step;
    const std::string context = fmt::format("step {}", step);
    const int source = s.link.receiveUp(incoming.data(), context);
    const std::int64_t behind = step - trailerVersion(incoming[versionAt], source);
    if (behind > limit) {
      ++counts.stale;
      ++counts.staleTotal;
      ++counts.staleByRank[source];
      if (mode.stale == config::StalePolicy::RetryAfter) {
        s.setHeader(step, Control::Retry, s.lr(step));
        s.link.packDown();
      }
      s.link.sendDown(source, context);
      continue;
    }
    if (waiting.empty()) {
      std::copy(incoming.begin(), incoming.end(), messages.up.begin());
    } else {
      for (std::size_t i = 0; i < incoming.size(); ++i) messages.up[i] += incoming[i];
    }
    waiting.push_back(source);
    ++counts.accepted;
    ++counts.staleness[behind];
    if (static_cast<int>(waiting.size()) < quorum) continue;

    const double lr = s.lr(step);
    StepStats stats = s.stats(quorum);
    stats.exchangeSeconds = secondsSince(exchangeStart);
    const auto updateStart = Clock::now();
    stats.applied = s.update.apply(lr, quorum, step);
    stats.updateSeconds = secondsSince(updateStart);
    stats.gradNorm = s.update.gradNorm();
    s.publisher->record(step, lr, stats);
    ++step;
    s.setHeader(step, Control::Train, s.lr(std::min(step, s.total - 1)));
    s.link.packDown();
    for (int w : waiting) s.link.sendDown(w, context);
    waiting.clear();
    exchangeStart = Clock::now();
  }
  // Every worker is either waiting (its gradient is in) or computing: stop both kinds.
  s.setHeader(step, Control::Stop);
  s.link.packDown();
  for (int w : waiting) s.link.sendDown(w, s.stopContext);
  for (int left = s.computing - static_cast<int>(waiting.size()); left > 0; --left) {
    s.link.sendDown(s.link.receiveUp(incoming.data(), s.stopContext), s.stopContext);
  }
  std::cout << counts.summary(mode.name) << std::endl;
  s.publisher->finish(step);
}

// The server's announcement of the run, then `loop` until every step is done (or
// --max-seconds, or a stop request).
void runServer(const RoleArgs& args, void (*loop)(Server&)) {
  Server s(args);
  const config::TrainConfig& cfg = args.cfg;
  const config::ModeInfo& mode = cfg.modeInfo();
  if (s.total >= kMaxVersionedSteps && mode.versioned()) {
    throw ConfigError(fmt::format("--mode {} counts at most {} steps", mode.name, kMaxVersionedSteps - 1));
  }
  std::string modeText = mode.name;
  if (mode.quorum == config::Quorum::Aggregate) {
    modeText += fmt::format(" (aggregate {} of {})", cfg.batchesPerUpdate(s.computing), s.computing);
  }
  if (mode.stale == config::StalePolicy::RetryAfter) modeText += fmt::format(" (max staleness {})", cfg.maxStaleness);
  if (mode.outerOptimizer()) {
    modeText += fmt::format(" ({} local steps a round{}{}; outer {}, lr {}, momentum {})", cfg.localSteps,
                            cfg.balance ? ", dealt by speed" : "", cfg.overlapRounds ? ", exchanged during the next" : "",
                            cfg.outerOptimizer, cfg.outerLr, cfg.outerMomentum);
  }
  std::cout << fmt::format("pstrain: {} mode, {} workers, {} steps ({} per epoch), model {} ({} parameters), "
                           "{}, batch {} per worker{}{}",
                           modeText, s.computing, s.total, s.updatesPerEpoch, cfg.model, s.messages.weights.numel(),
                           cfg.describeTrainSet(args.trainSamples), cfg.describeBatch(),
                           s.shards != s.computing ? fmt::format(" and virtual shard ({} virtual shards: {} per step)",
                                                                 s.shards, s.shards * cfg.shardBatch()) : "",
                           s.firstStep ? fmt::format("; resuming at step {}", s.firstStep) : "")
            << std::endl;
  loop(s);
}

}  // namespace

void serveCollective(const RoleArgs& args) { runServer(args, runCollective); }

void serveRounds(const RoleArgs& args) { runServer(args, runRounds); }

void servePointToPoint(const RoleArgs& args) { runServer(args, runPointToPoint); }

}  // namespace pstrain::roles
