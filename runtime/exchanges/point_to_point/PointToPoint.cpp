#include "runtime/exchanges/point_to_point/PointToPoint.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <vector>

#include "runtime/Errors.h"
#include "runtime/Stop.h"
#include "runtime/metrics/Clock.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/roles/ServerLoop.h"
#include "runtime/roles/WorkerLoop.h"

namespace pstrain::exchanges::point_to_point {
namespace {

using namespace roles;
using namespace protocol;
using metrics::Clock;
using metrics::secondsSince;

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

// A gradient carries the version of the weights it was computed on as a float: the run
// must count fewer steps than a float holds exactly. Then the mode's policy, in words.
std::string describe(const Server& s) {
  const config::ModeInfo& mode = s.cfg.modeInfo();
  if (s.total >= kMaxVersionedSteps) {
    throw ConfigError(fmt::format("--mode {} counts at most {} steps", mode.name, kMaxVersionedSteps - 1));
  }
  if (mode.quorum == config::Quorum::Aggregate) {
    return fmt::format("aggregate {} of {}", s.cfg.batchesPerUpdate(s.computing), s.computing);
  }
  return mode.stale == config::StalePolicy::RetryAfter ? fmt::format("max staleness {}", s.cfg.maxStaleness) : "";
}

void serve(const RoleArgs& args) { runServer(args, runPointToPoint, describe); }

void work(const RoleArgs& args) { runWorker(args, {&StepLink::receiveDown, &StepLink::sendUp, false}); }

// The quorum's gradients in and its weights out through the server's link, one message after
// the other, and the update:
//   aggregate (backup): k = n - 1 of n (at least 1): the k-th fastest batch, k x b per update;
//   one (async): each worker on its own cycle (batch + its messages both ways), as long as
//     the server's link and update keep up with all of them; one batch per update.
exchanges::StepEstimate cost(const exchanges::StepCost& c) {
  using exchanges::message;
  const exchanges::Links l = exchanges::linksOf(c.m, c.n);
  const exchanges::CodecCost &grad = c.grad, &weights = c.weights;
  const exchanges::ProbeMeasurements& m = c.m;
  if (c.mode.quorum == config::Quorum::Aggregate) {
    const int k = std::max(1, c.n - 1);
    return {exchanges::kthFastest(m, c.n, k) + grad.encodeSeconds + k * message(grad.bytes, l.worstLatency, l.serverBandwidth) +
                k * grad.decodeSeconds + m.updateSeconds + weights.encodeSeconds +
                k * message(weights.bytes, l.worstLatency, l.serverBandwidth) + weights.decodeSeconds,
            k * m.batchSamples};
  }
  // Samples per second: each worker's own cycle, unless the server is the bottleneck.
  double rate = 0;
  for (int i = 0; i < c.n; ++i) {
    const double cycle = m.computeSeconds[i] + grad.encodeSeconds + message(grad.bytes, m.latencySeconds[i], m.bytesPerSecond[i]) +
                         grad.decodeSeconds + m.updateSeconds + weights.encodeSeconds +
                         message(weights.bytes, m.latencySeconds[i], m.bytesPerSecond[i]) + weights.decodeSeconds;
    rate += m.batchSamples / cycle;
  }
  const double serverPerGradient =
      (grad.bytes + weights.bytes) / l.serverBandwidth + grad.decodeSeconds + m.updateSeconds + weights.encodeSeconds;
  rate = std::min(rate, m.batchSamples / serverPerGradient);
  return {m.batchSamples / rate, m.batchSamples};  // one gradient per update
}

// The server: the optimizer's state, a gradient received and the sum, the bfloat16 weights it
// sends (converted whole). A worker: its whole gradient, sent after backward.
exchanges::Memory memory(const config::TrainConfig& cfg, const config::Layout&) {
  exchanges::Memory m;
  m.held = exchanges::weightBytes(cfg) + 4;
  m.worker = exchanges::residualBytes(cfg);
  m.server = exchanges::stateBytes(cfg) + 8 + (cfg.bf16Weights() ? 2 : 0);
  return m;
}

}  // namespace
}  // namespace pstrain::exchanges::point_to_point

namespace pstrain::exchanges {

const Exchange kPointToPoint = {config::Exchange::PointToPoint, nullptr, point_to_point::serve, point_to_point::work, point_to_point::cost, nullptr,
                                 point_to_point::memory};

}  // namespace pstrain::exchanges
