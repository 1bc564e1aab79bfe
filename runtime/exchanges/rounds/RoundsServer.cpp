// Rank 0 of the local-rounds exchange (diloco): each round the workers' summed
// pseudo-gradient up the chain, the outer optimizer's step of the global weights, and the
// weights (or the update toward them) back down.
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <iostream>
#include <vector>

#include "runtime/Stop.h"
#include "runtime/codec/Codec.h"
#include "runtime/exchanges/rounds/RoundChain.h"
#include "runtime/exchanges/rounds/Rounds.h"
#include "runtime/exchanges/rounds/RoundsPlan.h"
#include "runtime/exchanges/rounds/OuterRanges.h"
#include "runtime/optim/LrSchedule.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/roles/Balance.h"
#include "runtime/roles/ServerLoop.h"

namespace pstrain::roles {
namespace {

using namespace protocol;

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

// The global weights as the server keeps them. The outer optimizer steps messages.weights;
// with a lossy down codec the model (what checkpoints hold, and what every worker holds bit
// for bit, in bfloat16) is a copy of them, rounded to bfloat16, that each round's coded
// update moves toward them.
struct GlobalWeights {
  explicit GlobalWeights(Server& s, bool updates) : s(s) {
    if (!updates) return;
    copy = std::make_unique<FloatBuffer>(static_cast<std::size_t>(s.messages.weights.numel()));
    std::copy(s.messages.weights.data_ptr<float>(), s.messages.weights.data_ptr<float>() + copy->size(), copy->data());
    bindParameters(s.model, copy->view(0, static_cast<std::int64_t>(copy->size())));  // (copies the model's values in)
    roundToCopy(copy->data(), static_cast<std::int64_t>(copy->size()));  // bfloat16's values, as the workers hold them
  }
  float* sent() { return copy ? copy->data() : s.messages.weights.data_ptr<float>(); }
  const float* target() const { return copy ? s.messages.weights.data_ptr<float>() : nullptr; }

  Server& s;
  std::unique_ptr<FloatBuffer> copy;
};

// The decision from the measures of round kMeasuredRound (RoundsPlan.h's chooseRounds):
// said on stdout and in run.json.
RoundsDecision decide(Server& s, const RoundsPlan& plan, std::int64_t length, const StepStats& first) {
  const double step = first.slowestComputeSeconds / static_cast<double>(std::max<std::int64_t>(length, 1));
  const double exchange = std::max(0.0, first.exchangeSeconds - first.slowestComputeSeconds);
  const RoundsDecision d = chooseRounds(plan, step, exchange);
  std::cout << fmt::format("pstrain: diloco: round {} took {:.3f} s a local step and {:.3f} s to exchange: {} local "
                           "steps a round from round {} on{}", kMeasuredRound, step, exchange, d.localSteps,
                           kMeasuredRound + 2, d.overlap ? ", each exchanged during the next round" : "")
            << std::endl;
  metrics::JsonObject measured;
  measured.add("local_steps", d.localSteps).add("overlap", d.overlap);
  measured.add("local_steps_setting", plan.localSteps > 0 ? std::to_string(plan.localSteps) : std::string(config::kAuto));
  measured.add("step_s", step).add("exchange_s", exchange);
  s.publisher->addToRunJson("rounds", measured);
  return d;
}

// A round's traffic on rank 0's link, as the chain counted it, into its stats (and, with K
// servers, server 0's Partial).
void addTraffic(StepStats& stats, const RoundChain::Traffic& traffic, OuterLead* lead) {
  if (lead) lead->countTraffic(traffic.sent, traffic.received);
  stats.bytesDown = traffic.sent;
  stats.rawBytesDown = traffic.rawSent;
  stats.bytesUp = traffic.received;
  stats.rawBytesUp = traffic.rawReceived;
  stats.codecSeconds += traffic.codecSeconds;
}

// Every rank waits a round for the slowest worker, so --timeout must outlast one: a warning
// when a round of `steps` local steps took more than half of it. Returns whether it warned.
bool warnIfNearTimeout(const config::TrainConfig& cfg, const StepStats& stats, std::int64_t steps) {
  if (stats.slowestComputeSeconds <= cfg.timeoutSeconds / 2) return false;
  std::cout << fmt::format("pstrain: warning: a round of {} local steps took {:.1f} s, --timeout is {} s: raise "
                           "--timeout above a round, or lower --local-steps", steps, stats.slowestComputeSeconds,
                           cfg.timeoutSeconds) << std::endl;
  return true;
}

// Under loss scaling a round whose local steps every worker's scale skipped carries no
// samples (RoundsWorker): its outer step is skipped, said.
bool overflowedRound(Server& s, std::int64_t step, std::int64_t steps) {
  if (s.messages.trailer[kSamples] != 0 || !s.cfg.lossScaling()) return false;
  std::cout << fmt::format("pstrain: steps {}-{}: every worker's local steps overflowed; the outer step is skipped",
                           step, step + steps - 1)
            << std::endl;
  return true;
}

// The floats of the down message before the weights: the decision, the header, the
// buffers and shares.
std::int64_t downFixedFloats(const Server& s) {
  return static_cast<std::int64_t>(kDecisionFloats + kHeaderFloats) + s.messages.downTail.numel();
}

// The down message: `decision`, the header, buffers and shares, then the weights whole
// (`whole`: the first round's) or the update toward the outer step's.
void sendDownMessage(Server& s, RoundChain& chain, const RoundsDecision& decision, GlobalWeights& global, bool whole,
                     const std::string& context) {
  std::vector<float> fixed(static_cast<std::size_t>(downFixedFloats(s)));
  writeDecision(decision, fixed.data());
  std::copy(s.messages.down.data(), s.messages.down.data() + kHeaderFloats, fixed.begin() + kDecisionFloats);
  std::copy(s.messages.downTail.data_ptr<float>(), s.messages.downTail.data_ptr<float>() + s.messages.downTail.numel(),
            fixed.begin() + kDecisionFloats + kHeaderFloats);
  chain.startServerDown(fixed.data(), global.sent(), whole ? nullptr : global.target(), context);
  chain.finish();
}

// What the Publisher reads beyond the model: the rounds' counts (and, with K servers, their
// figures, and the optimizer state they hold: CheckpointGather).
void tellPublisher(Server& s, RoundCounts& counts, OuterLead* lead) {
  s.publisher->setExtras([&counts, lead](metrics::JsonObject& line) {
    counts.addTo(line);
    if (lead) lead->addServers(line);
  });
  if (lead) {
    s.publisher->setRecordSource(
        [lead](const void* data, std::size_t bytes, const checkpoint::RecordWrite& write) {
          return lead->checkpoints().recordSource(data, bytes, write);
        });
  }
}

// The outer step of the round from `first`: over every server's range with K servers
// (`lead`), else here; `skip` (overflowedRound), `gather` and `train`: OuterLead::apply's.
// Returns whether it was applied.
bool applyRound(Server& s, OuterLead* lead, std::int64_t first, bool skip, bool gather, bool train, UpdateTime& update) {
  if (lead) return lead->apply(first, s.lr(first), skip, gather, train, update);
  bool applied = false;  // (apply refuses 0 samples otherwise)
  if (!skip) update.add([&] { applied = s.update.apply(s.lr(first), s.computing, first); });
  return applied;
}

// Local rounds (diloco): each round the global weights go down with each worker's local
// steps (the shares; --balance deals them by speed), every worker trains alone that long
// and sends its pseudo-gradient (global - local, times its samples) up to be summed like a
// gradient, and the outer rule (UpdateState::rule) steps the global weights with the mean.
// A round of H local steps on each of W workers is H steps of the run: as many samples as H
// sync steps. The last round may be shorter; it is dealt evenly. A round of the first
// measures what --local-steps auto and --overlap-rounds auto decide for the rest.
void runRounds(Server& s) {
  const RoundsPlan plan = roundsPlanOf(s.cfg);
  RoundsDecision decision{plan.localSteps > 0 ? plan.localSteps : kFirstRoundSteps, false};
  const int workers = s.computing;
  const std::int64_t weightCount = s.messages.weights.numel();
  RoundChain chain(s.comm, endsOf(roundsRanges(s.model, s.cfg)),
                   static_cast<std::int64_t>(s.messages.up.size()) - weightCount, downFixedFloats(s), plan.codecs,
                   s.cfg.seed * 7919u);
  GlobalWeights global(s, chain.sendsUpdates());
  // With K servers (--servers): the others' ranges, and range 0's outer step.
  std::unique_ptr<OuterLead> lead = s.cfg.servers > 1 ? std::make_unique<OuterLead>(s) : nullptr;
  // The shares are by rank, the workers' from rank K on: the balancer's "rank 0" is K - 1.
  const std::size_t firstShare = static_cast<std::size_t>(s.cfg.servers) - 1;
  auto balancerOf = [&](std::int64_t H) {
    return ShareBalancer(workers + 1, static_cast<int>(std::min<std::int64_t>(H * workers, 1 << 30)), s.cfg.balance(),
                         /*rebalanceEvery=*/1);
  };
  ShareBalancer balancer = balancerOf(decision.localSteps);
  RoundCounts counts;
  counts.outerLr = s.lr(0);
  tellPublisher(s, counts, lead.get());
  std::int64_t step = s.firstStep;
  auto innerLr = [&](std::int64_t at) {
    return optim::learningRate(s.cfg, s.cfg.batchesPerUpdate(s.shards), std::min(at, s.total - 1), s.total);
  };
  // Whether the next round trains; then its header and shares (or the stop): its first
  // step, its inner lr, each worker's local steps; `length`: its steps.
  auto trains = [&] { return step < s.total && !s.publisher->timeToStop(); };
  std::int64_t length = 0;
  auto announce = [&](bool train) {
    const std::int64_t H = decision.localSteps;
    s.setHeader(step, train ? Control::Train : Control::Stop, train ? innerLr(step) : 0);
    length = std::min(H, s.total - step);
    float* shares = s.messages.shares.data_ptr<float>() + firstShare;
    balancer.write(shares);
    if (length > 0 && length < H) std::fill_n(shares + 1, workers, static_cast<float>(length));
    counts.localSteps.assign(shares + 1, shares + 1 + workers);
    return train;
  };
  auto contextOf = [&](bool train) { return train ? fmt::format("round at step {}", step) : s.stopContext; };
  auto sendDown = [&](bool train, bool whole) { sendDownMessage(s, chain, decision, global, whole, contextOf(train)); };
  bool training = announce(trains());
  if (lead) lead->start(training);
  sendDown(training, /*whole=*/true);
  Period period;
  bool warnedOfTimeout = false;
  int rounds = 0;
  while (training) {
    currentStep() = step;
    const std::int64_t steps = length, H = decision.localSteps;
    chain.startServerUp(lead ? lead->sum() : s.messages.up.data(), s.messages.up.data() + weightCount, contextOf(true));
    s.comm.expectLongWait();  // the workers train first
    chain.finish();
    const std::int64_t first = step;
    const bool skip = overflowedRound(s, first, steps);
    step += steps;
    if (steps == H) balancer.record(s.messages.trailer + kComputeSeconds + firstShare);
    const bool train = trains(), gather = lead && (!train || s.publisher->checkpointsAt(step - 1, steps));
    UpdateTime update;
    const bool applied = applyRound(s, lead.get(), first, skip, gather, train, update);
    training = announce(train);
    sendDown(training, /*whole=*/false);
    if (gather) lead->gather(global.sent(), contextOf(training));
    StepStats stats = period.close(s, workers, update, /*updateWithin=*/false, applied);
    addTraffic(stats, chain.take(), lead.get());
    counts.add(stats, s.update.gradNorm());
    if (!warnedOfTimeout) warnedOfTimeout = warnIfNearTimeout(s.cfg, stats, steps);
    s.publisher->record(step - 1, innerLr(first), stats, steps);
    if (lead && training) lead->checkpoints().release();
    // The second round is the first whose workers all started together (the first's down
    // message, the whole weights, reached them one after another along the chain): it
    // decides. After the first record, which rewrites run.json with the start-up's times.
    if (++rounds == kMeasuredRound) {
      decision = decide(s, plan, steps, stats);
      balancer = balancerOf(decision.localSteps);
    }
  }
  s.publisher->finish(step);
  if (lead) lead->checkpoints().release();
}

}  // namespace

void runRoundsOthers(const RoleArgs& args) {
  (args.comm.rank() < args.cfg.servers ? followRounds : runRoundsWorker)(args);
}

void serveRounds(const RoleArgs& args) {
  auto describe = [](const Server& s) { return describeRounds(roundsPlanOf(s.cfg), s.cfg); };
  runServer(args, runRounds, describe, /*stepLink=*/false);
}

}  // namespace pstrain::roles
