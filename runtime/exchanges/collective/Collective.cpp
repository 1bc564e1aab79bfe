#include "runtime/exchanges/collective/Collective.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "runtime/Stop.h"
#include "runtime/config/Layout.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/roles/Balance.h"
#include "runtime/roles/ServerLoop.h"
#include "runtime/roles/SummedStep.h"

namespace pstrain::exchanges::collective {

void work(const roles::RoleArgs& args);  // CollectiveWorker.cpp

namespace {

using namespace roles;
using namespace protocol;

// A sync step's gradients up and its update: the whole up message, then the update; or,
// with overlap, each bucket's update as soon as it is summed (its weights then start down
// while later buckets still travel up). Returns whether the update was applied.
bool reduceAndUpdate(Server& s, const std::vector<Bucket>& buckets, std::int64_t step, double lr, UpdateTime& time) {
  const std::string context = fmt::format("step {}", step);
  if (!s.cfg.updatesOnArrival()) {
    if (s.cfg.streamsGradients()) {
      s.link->reduceUpBuckets(buckets, context);
    } else {
      s.link->reduceUp(context);
    }
    bool applied = false;
    time.add([&] { applied = s.apply(lr, s.shards, step); });
    return applied;
  }
  // The step's sample count is known in advance: the shards' batch sizes.
  // One update over every bucket equals one over the whole gradient (RangeUpdate::stepPart).
  const double samples = static_cast<double>(s.shards * s.sampler.batchSizeAt(step));
  s.update.beginParts();
  s.link->reduceUpInBuckets(buckets, [&](const Bucket& b, at::Tensor& grad) {
    time.add([&] {
      if (!s.update.stepPart(grad.data_ptr<float>(), b.begin, b.end - b.begin, lr, samples)) {
        throw s.admission.nonFinite(step);
      }
    });
  }, context);
  time.add([&] {
    s.admission.setGradNorm(std::sqrt(s.update.sumOfSquares()) / samples);
    s.admission.expectSamples(s.messages.trailer, samples, step);
    roles::averageBuffers(s.messages, s.model, s.shards);
  });
  return true;
}

// Collective exchange: each step the workers' gradients up, the update, the next step's
// weights down.
void runCollective(Server& s) {
  const bool overlap = s.cfg.updatesOnArrival();
  const auto buckets = gradientBuckets(s.model, s.cfg.bucketKb * 1024);
  std::int64_t step = s.firstStep;
  // The header of the next down message: train `step`, or stop.
  auto announce = [&] {
    const bool train = step < s.total && !s.publisher->timeToStop(step);
    s.setHeader(step, train ? Control::Train : Control::Stop, train ? s.lr(step) : 0);
    return train;
  };
  auto contextOf = [&](bool train) { return train ? fmt::format("step {}", step) : s.stopContext; };
  const config::Layout layout(s.cfg, s.comm.size());
  ShareBalancer balancer(layout.servers(), layout.workers(), s.shards, s.cfg.balance());
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
    stats.gradNorm = s.admission.gradNorm();
    s.publisher->record(done, lr, stats);
  }
  s.publisher->finish(step);
}

void serve(const RoleArgs& args) { runServer(args, runCollective); }

// A binomial-tree reduce of the gradient and broadcast of the weights (ceil(log2(n + 1))
// rounds each, over the slowest link) after the slowest batch, and the server's update; with
// a gradient codec the payloads are gathered instead (n messages through the server's link,
// one after the other) and decoded there. Overlap with backward is not credited.
exchanges::StepEstimate cost(const exchanges::StepCost& c) {
  using exchanges::message;
  const exchanges::Links l = exchanges::linksOf(c.m, c.n);
  const double rounds = std::ceil(std::log2(c.n + 1.0));
  const double down = c.weights.encodeSeconds + rounds * message(c.weights.bytes, l.worstLatency, l.slowestBandwidth) +
                      c.weights.decodeSeconds;
  const double up = c.raw ? rounds * message(c.grad.bytes, l.worstLatency, l.slowestBandwidth)
                          : c.grad.encodeSeconds + c.n * message(c.grad.bytes, l.worstLatency, l.serverBandwidth) +
                                c.n * c.grad.decodeSeconds;
  return {exchanges::kthFastest(c.m, c.n, c.n) + up + c.m.updateSeconds + down, c.n * c.m.batchSamples};
}

// The server: the optimizer's state, the sum unless it updates each bucket on arrival, the
// bfloat16 weights it sends (converted whole). A worker: the whole gradient unless it
// streams under --memory lean.
exchanges::Memory memory(const config::RunPlan& cfg, const config::Layout&) {
  exchanges::Memory m;
  m.held = exchanges::weightBytes(cfg);
  exchanges::addGradientBuffer(m, cfg, cfg.streamsGradients());
  m.worker = exchanges::residualBytes(cfg);
  m.server = exchanges::stateBytes(cfg) + (cfg.updatesOnArrival() ? 0 : 4) + (cfg.bf16Weights() ? 2 : 0);
  return m;
}

exchanges::PlanText plan(const exchanges::PlanFacts& f) {
  exchanges::PlanText text;
  if (!f.cfg.streamsGradients()) return text;
  text.sameLine = fmt::format("; in {} buckets of {} KiB, gradients reduced during backward, {}",
                              gradientBuckets(f.model, f.cfg.bucketKb * 1024).size(), f.cfg.bucketKb,
                              f.cfg.updatesOnArrival() ? "weights broadcast as each bucket is updated"
                                                  : "the update once all are in");
  return text;
}

}  // namespace
}  // namespace pstrain::exchanges::collective

namespace pstrain::exchanges {

const Exchange kCollective = {config::Exchange::Collective, nullptr, collective::serve, collective::work, collective::cost, collective::plan,
                               collective::memory};

}  // namespace pstrain::exchanges
