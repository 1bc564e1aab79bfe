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
#include "runtime/roles/ServerLoop.h"

namespace pstrain::roles {
namespace {

using namespace protocol;
using metrics::Clock;
using metrics::secondsSince;

// A sync step's gradients up and its update: the whole up message, then the update; or,
// with overlap, each bucket's update as soon as it is summed (its weights then start down
// while later buckets still travel up). Returns whether the update was applied.
bool reduceAndUpdate(Server& s, const std::vector<Bucket>& buckets, std::int64_t step, double lr, UpdateTime& time) {
  const std::string context = fmt::format("step {}", step);
  if (!s.cfg.overlapping()) {
    s.link->reduceUp(context);
    bool applied = false;
    time.add([&] { applied = s.update.apply(lr, s.shards, step); });
    return applied;
  }
  // The step's sample count is known in advance: the shards' batch sizes.
  const double samples = static_cast<double>(s.shards * s.sampler.batchSizeAt(step));
  s.link->reduceUpInBuckets(buckets, [&](const Bucket& b, at::Tensor& grad) {
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
  ShareBalancer balancer(s.comm.size(), s.shards, s.cfg.balance());
  balancer.write(s.messages.shares.data_ptr<float>());
  if (s.cfg.balance()) {
    s.publisher->setExtras([&](metrics::JsonObject& line) {
      line.addRaw("virtual_shards_by_worker", metrics::jsonArray(balancer.counts()));
    });
  }
  bool training = announce();
  s.link->broadcastDown(contextOf(training));
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
      s.link->finishDown(contextOf(training));
    } else {
      s.link->broadcastDown(contextOf(training));
    }
    StepStats stats = period.close(s, s.computing, update, overlap, applied);
    stats.gradNorm = s.update.gradNorm();
    s.publisher->record(done, lr, stats);
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
  s.link->packDown();
  for (int w = 1; w <= s.computing; ++w) s.link->sendDown(w, "start");
  auto exchangeStart = Clock::now();
  while (step < s.total && !s.publisher->timeToStop()) {
    currentStep() = step;
    const std::string context = fmt::format("step {}", step);
    const int source = s.link->receiveUp(incoming.data(), context);
    const std::int64_t behind = step - trailerVersion(incoming[versionAt], source);
    if (behind > limit) {
      ++counts.stale;
      ++counts.staleTotal;
      ++counts.staleByRank[source];
      if (mode.stale == config::StalePolicy::RetryAfter) {
        s.setHeader(step, Control::Retry, s.lr(step));
        s.link->packDown();
      }
      s.link->sendDown(source, context);
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
    s.link->packDown();
    for (int w : waiting) s.link->sendDown(w, context);
    waiting.clear();
    exchangeStart = Clock::now();
  }
  // Every worker is either waiting (its gradient is in) or computing: stop both kinds.
  s.setHeader(step, Control::Stop);
  s.link->packDown();
  for (int w : waiting) s.link->sendDown(w, s.stopContext);
  for (int left = s.computing - static_cast<int>(waiting.size()); left > 0; --left) {
    s.link->sendDown(s.link->receiveUp(incoming.data(), s.stopContext), s.stopContext);
  }
  std::cout << counts.summary(mode.name) << std::endl;
  s.publisher->finish(step);
}

}  // namespace

void serveCollective(const RoleArgs& args) { runServer(args, runCollective); }

void servePointToPoint(const RoleArgs& args) { runServer(args, runPointToPoint); }

}  // namespace pstrain::roles
