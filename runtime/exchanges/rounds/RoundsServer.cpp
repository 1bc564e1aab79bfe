// Rank 0 of the local-rounds exchange (diloco): each round the workers' summed
// pseudo-gradient up the chain, the outer optimizer's step of the global weights, and the
// weights (or the update toward them) back down.
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <vector>

#include "runtime/Stop.h"
#include "runtime/codec/Codec.h"
#include "runtime/exchanges/rounds/RoundChain.h"
#include "runtime/exchanges/rounds/Rounds.h"
#include "runtime/exchanges/rounds/RoundsPlan.h"
#include "runtime/exchanges/ServedRange.h"
#include "runtime/exchanges/ServerZero.h"
#include "runtime/exchanges/rounds/OuterRanges.h"
#include "runtime/metrics/Clock.h"
#include "runtime/optim/LrSchedule.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/roles/Balance.h"
#include "runtime/roles/ServerLoop.h"
#include "runtime/roles/SummedStep.h"

namespace pstrain::exchanges::rounds {

using namespace roles;
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

// A measuring round as rank 0 saw it: the slowest worker's seconds a local step, and the
// seconds of its exchange: from the start of its down message to the end of its up message,
// less the slowest worker's compute (the round does not overlap: the workers wait for the
// one and send the other after computing).
struct MeasuredRound {
  double stepSeconds = 0, exchangeSeconds = 0;
};

// The decision from the measuring rounds (RoundsPlan.h's chooseRounds): their mean seconds a
// step, and the longest exchange. It holds from round `from` on. Said on stdout and in
// run.json.
RoundsDecision decide(Server& s, const RoundsPlan& plan, const std::vector<MeasuredRound>& measured, int from) {
  double step = 0, exchange = 0;
  for (const MeasuredRound& round : measured) {
    step += round.stepSeconds / static_cast<double>(measured.size());
    exchange = std::max(exchange, round.exchangeSeconds);
  }
  const RoundsDecision d = chooseRounds(plan, step, exchange);
  std::cout << fmt::format("pstrain: diloco: rounds 2 to {} took {:.3f} s a local step and up to {:.3f} s to exchange: "
                           "{} local steps a round from round {} on{} ({})", kMeasuredRounds, step, exchange,
                           d.localSteps, from, d.overlap ? ", each exchanged during the next round" : "",
                           whyRounds(d))
            << std::endl;
  metrics::JsonObject json;
  json.add("local_steps", d.localSteps).add("overlap", d.overlap).add("fragments", d.fragments);
  json.add("local_steps_setting", plan.localSteps > 0 ? std::to_string(plan.localSteps) : std::string(config::kAuto));
  json.add("step_s", step).add("exchange_s", exchange);
  if (d.predicted > 0) json.add("predicted_s_per_sync_step", d.predicted);
  s.publisher->addToRunJson("rounds", json);
  return d;
}

// A round's traffic on rank 0's link, as the chain counted it, into its stats (and, with K
// servers, server 0's Partial).
void addTraffic(StepStats& stats, const RoundChain::Traffic& traffic, ServerZero* lead) {
  if (lead) lead->own().countTraffic(traffic.sent, traffic.received);
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

// What a down message carries after its fixed part: the weights whole (the first, unless
// the workers hold them already: RunPlan::workersHoldWeights), nothing (the first, where they
// do), or the update toward the outer step's.
enum class DownWeights { Whole, Held, Update };

// The down message on `lane`: `decision`, the header, buffers and shares, then `weights`
// (the lane's).
void sendDownMessage(Server& s, Lane& lane, const RoundsDecision& decision, GlobalWeights& global, DownWeights weights,
                     const std::string& context) {
  std::vector<float> fixed(static_cast<std::size_t>(downFixedFloats(s)));
  writeDecision(decision, fixed.data());
  std::copy(s.messages.down.data(), s.messages.down.data() + kHeaderFloats, fixed.begin() + kDecisionFloats);
  std::copy(s.messages.downTail.data_ptr<float>(), s.messages.downTail.data_ptr<float>() + s.messages.downTail.numel(),
            fixed.begin() + kDecisionFloats + kHeaderFloats);
  const float* target = weights == DownWeights::Update ? global.target() : nullptr;  // null: the weights whole
  lane.chain->startServerDown(fixed.data(), weights == DownWeights::Held ? nullptr : global.sent() + lane.begin,
                              target ? target + lane.begin : nullptr, context);
  lane.chain->finish();
}

// What the Publisher's lines add: the rounds' counts (and, with K servers, each server's
// bytes per round, update time and peak memory).
void tellPublisher(Server& s, RoundCounts& counts, ServerZero* lead) {
  s.publisher->setExtras([&counts, lead](metrics::JsonObject& line) {
    counts.addTo(line);
    if (lead) addServers(line, lead->partials(), 1);
  });
}

// The outer step of the round from `first` on `lane`'s weights: over every server's range
// with K servers (`lead`: every server's word, the verdict told to each), else here.
// `skip`: the round carries no samples (overflowedRound); `gather`: a checkpoint's ranges
// follow the down message; `train`: whether the run trains on. Returns whether it was
// applied.
bool applyRound(Server& s, ServerZero* lead, const Lane& lane, std::int64_t first, bool skip, bool gather, bool train,
                UpdateTime& update) {
  if (lead) {
    Verdict v;
    v.apply = skip ? 0 : 1;
    v.lr = s.lr(first);
    v.gather = gather;
    v.train = train;
    double gradNorm = 0;
    v = lead->decide(first, v, gradNorm);
    update.add([&] { lead->apply(v, first, s.computing); });
    return v.apply != 0;
  }
  bool applied = false;  // (apply refuses 0 samples otherwise)
  if (skip) return false;
  update.add([&] {
    applied = lane.count == s.messages.weights.numel()
                  ? s.apply(s.lr(first), s.computing, first)
                  : applySummedPart(s.admission, s.update, s.messages, s.model, s.lr(first), s.computing, first,
                                    lane.begin, lane.count);
  });
  return applied;
}

// Local rounds (diloco): each round the global weights go down with each worker's local
// steps (the shares; --balance deals them by speed), every worker trains alone that long
// and sends its pseudo-gradient (global - local, times its samples) up to be summed like a
// gradient, and the outer rule (UpdateState::rule) steps the global weights with the mean.
// A round of H local steps on each of W workers is H steps of the run: as many samples as H
// sync steps. The last round may be shorter; it is dealt evenly. A round of the first
// measures what --local-steps auto and --overlap-rounds auto decide for the rest.
class RoundsLoop {
 public:
  explicit RoundsLoop(Server& s)
      : s_(s),
        plan_(roundsPlanOf(s.cfg)),
        decision_{plan_.localSteps > 0 ? plan_.localSteps : kFirstRoundSteps, false},
        workers_(s.computing),
        weightCount_(s.messages.weights.numel()),
        lanes_(roundLanes(s.comm, s.model, s.cfg, static_cast<std::int64_t>(s.messages.up.size()) - weightCount_,
                          downFixedFloats(s), plan_.codecs, s.cfg.seed * 7919u)),
        schedule_(plan_.fragments),
        global_(s, lanes_[0].chain->sendsUpdates()),
        lead_(s.cfg.servers > 1 ? std::make_unique<ServerZero>(s, roundsRanges(s.model, s.cfg),
                                                                ServedRange::Messages::Elsewhere)
                                : nullptr),
        firstWorker_(static_cast<std::size_t>(s.cfg.servers)),
        balancer_(balancerOf(decision_.localSteps)),
        step_(s.firstStep) {
    counts_.outerLr = s.lr(0);
    tellPublisher(s, counts_, lead_.get());
  }

  void run() {
    bool training = announce(trains());
    if (lead_) lead_->start({s_.firstStep, training, {}, startSendsWeights(s_)});
    if (s_.cfg.workersHoldWeights) {
      std::cout << "pstrain: diloco: every worker holds the server's initial weights (their CRC-32s agree): the first "
                   "down message leaves them out" << std::endl;
    }
    sendDown(training, lanes_[0], s_.cfg.workersHoldWeights ? DownWeights::Held : DownWeights::Whole);
    while (training) training = round(length_);
    s_.publisher->finish(step_);
    if (lead_) lead_->release();
  }

 private:
  // What the round just in (the rounds_-th, of `steps` local steps, whose up message came
  // at `arrived`, its slowest worker computing `compute` seconds) tells the rounds to come,
  // before its down message announces the next. The second round is the first whose workers
  // all started together (the first's down message reached them one after another along the
  // chain): it and the next measure, and the last of them decides, for the round its down
  // message announces. Once overlapped, an auto H grows where it did not hide its exchange.
  void adapt(std::int64_t steps, metrics::Clock::time_point arrived, double compute) {
    if (rounds_ >= 2 && rounds_ <= kMeasuredRounds) {
      const double exchange = std::chrono::duration<double>(arrived - downStart_).count() - compute;
      measured_.push_back({compute / static_cast<double>(std::max<std::int64_t>(steps, 1)), std::max(exchange, 0.0)});
    }
    if (rounds_ == kMeasuredRounds) {
      decision_ = decide(s_, plan_, measured_, rounds_ + 1);
      balancer_ = balancerOf(decision_.localSteps);
    } else if (rounds_ > kMeasuredRounds + 1) {
      // The first overlapped round started after its down message came; from the second on,
      // the time between two up messages is a round's compute where its exchange hides.
      raiseUnhidden(steps, std::chrono::duration<double>(arrived - lastArrival_).count(), compute);
    }
    lastArrival_ = arrived;
  }
  // An auto H whose overlapped exchange did not hide behind the round just in, of `steps`
  // steps, `period` seconds after the last for `compute` seconds of compute, grows
  // (RoundsPlan.h's raisedLocalSteps) from the round after the next (the next started on
  // the last down message's H), said on stdout.
  void raiseUnhidden(std::int64_t steps, double period, double compute) {
    const std::int64_t H = decision_.localSteps;
    if (plan_.localSteps > 0 || !decision_.overlap || steps != H) return;
    const std::int64_t raised = raisedLocalSteps(H, period, compute);
    if (raised == H) return;
    std::cout << fmt::format("pstrain: diloco: round {}'s exchange did not hide behind its {} local steps ({:.3f} s a "
                             "round for {:.3f} s of compute): {} local steps a round from round {} on", rounds_, H,
                             period, compute, raised, rounds_ + 2)
              << std::endl;
    decision_.localSteps = raised;
    balancer_ = balancerOf(raised);
  }

  // The shares are by rank, the workers' from rank K on.
  ShareBalancer balancerOf(std::int64_t H) const {
    return ShareBalancer(static_cast<int>(firstWorker_), workers_,
                         static_cast<int>(std::min<std::int64_t>(H * workers_, 1 << 30)), s_.cfg.balance(),
                         /*rebalanceEvery=*/1);
  }
  double innerLr(std::int64_t at) const {
    return optim::learningRate(s_.cfg, s_.cfg.batchesPerUpdate(s_.shards), std::min(at, s_.total - 1), s_.total);
  }
  // Whether the next round trains.
  bool trains() const { return step_ < s_.total && !s_.publisher->timeToStop(step_); }
  // The next down message's header and shares (or the stop): its first step, its inner lr,
  // each worker's local steps; length_: the steps of the round that comes up next. Its
  // workers run it on this message's decision, unless the last message's overlapped: then
  // they started it before this one could reach them, on the last one's H. Returns `train`.
  bool announce(bool train) {
    const std::int64_t H = decision_.localSteps;
    s_.setHeader(step_, train ? Control::Train : Control::Stop, train ? innerLr(step_) : 0);
    length_ = std::min(lastSent_.overlap ? lastSent_.localSteps : H, s_.total - step_);
    lastSent_ = decision_;
    const std::int64_t own = std::min(H, s_.total - step_);  // a round on this message's H from step_
    float* shares = s_.messages.shares.data_ptr<float>();
    balancer_.write(shares);
    float* byWorker = shares + firstWorker_;
    if (own > 0 && own < H) std::fill_n(byWorker, workers_, static_cast<float>(own));
    counts_.localSteps.assign(byWorker, byWorker + workers_);
    return train;
  }
  std::string contextOf(bool train) const { return train ? fmt::format("round at step {}", step_) : s_.stopContext; }
  void sendDown(bool train, Lane& lane, DownWeights weights) {
    downStart_ = metrics::Clock::now();
    sendDownMessage(s_, lane, decision_, global_, weights, contextOf(train));
  }

  // The round of `steps` local steps from step_: the pseudo-gradients in, the outer step,
  // the next round's down message (or the stop's), its record. Returns whether the run
  // trains on.
  bool round(std::int64_t steps) {
    currentStep() = step_;
    const std::int64_t H = decision_.localSteps;
    // The workers sent this round's up message on the last down message's decision.
    Lane& lane = lanes_[schedule_.next(lastSent_, step_ + steps >= s_.total)];
    float* sum = lead_ ? lead_->own().update().sum() : s_.messages.up.data() + lane.begin;  // with K servers: range 0's
    lane.chain->startServerUp(sum, s_.messages.up.data() + weightCount_, contextOf(true));
    s_.comm.expectLongWait();  // the workers train first
    lane.chain->finish();
    const auto arrived = metrics::Clock::now();
    ++rounds_;
    checkRoundStart(step_);
    const std::int64_t first = step_;
    const bool skip = overflowedRound(s_, first, steps);
    step_ += steps;
    if (steps == H) balancer_.record(s_.messages.trailer + kComputeSeconds);
    const bool train = trains(), gather = lead_ && (!train || s_.publisher->checkpointsAt(step_ - 1, steps));
    UpdateTime update;
    const bool applied = applyRound(s_, lead_.get(), lane, first, skip, gather, train, update);
    if (train) adapt(steps, arrived, summedStats(s_.messages, workers_).slowestComputeSeconds);
    const bool training = announce(train);
    sendDown(training, lane, DownWeights::Update);
    if (gather) lead_->gather(global_.sent(), contextOf(training));
    record(first, steps, update, applied, training, lane);
    return training;
  }
  // Every worker's up message says at which step its round started (kVersion, summed along
  // the chain): it must be the one rank 0 counts (`first`), or the two disagree on a round's
  // H. Checked while the sum is a float's exact integer.
  void checkRoundStart(std::int64_t first) const {
    const double expected = static_cast<double>(first) * workers_;
    const float said = s_.messages.trailer[kVersion];
    if (expected < 16777216.0 && static_cast<double>(said) != expected) {
      throw InternalError(fmt::format("diloco: the workers' round started at step {} (summed {}), rank 0 counted {}",
                                      static_cast<double>(said) / workers_, said, first));
    }
  }
  // The round's figures, from `first` over `steps` steps, into the metrics; `training`: the
  // run trains on (the checkpoint's ranges gathered for it can go).
  void record(std::int64_t first, std::int64_t steps, UpdateTime& update, bool applied, bool training, Lane& lane) {
    StepStats stats = period_.close(s_, workers_, update, /*updateWithin=*/false, applied);
    addTraffic(stats, lane.chain->take(), lead_.get());
    counts_.add(stats, s_.admission.gradNorm());
    if (!warnedOfTimeout_) warnedOfTimeout_ = warnIfNearTimeout(s_.cfg, stats, steps);
    s_.publisher->record(step_ - 1, innerLr(first), stats, steps);
    if (lead_ && training) lead_->release();
  }

  Server& s_;
  const RoundsPlan plan_;
  RoundsDecision decision_;  // what the next down message says
  RoundsDecision lastSent_;  // what the last one said
  const int workers_;
  const std::int64_t weightCount_;
  std::vector<Lane> lanes_;  // the whole model's chain, and the streamed fragments'
  LaneSchedule schedule_;
  GlobalWeights global_;
  std::unique_ptr<ServerZero> lead_;  // with K servers (--servers): the others' ranges, and range 0's outer step
  const std::size_t firstWorker_;  // the workers are ranks K on
  ShareBalancer balancer_;
  RoundCounts counts_;
  std::int64_t step_, length_ = 0;
  Period period_;
  int rounds_ = 0;  // the rounds whose up message came
  metrics::Clock::time_point downStart_, lastArrival_;  // the last down message's start, up message's end
  std::vector<MeasuredRound> measured_;  // rounds 2 to kMeasuredRounds
  bool warnedOfTimeout_ = false;
};

void runRounds(Server& s) { RoundsLoop(s).run(); }

}  // namespace

void runRoundsOthers(const RoleArgs& args) {
  (args.comm.rank() < args.cfg.servers ? followRounds : runRoundsWorker)(args);
}

void serveRounds(const RoleArgs& args) {
  auto describe = [](const Server& s) { return describeRounds(roundsPlanOf(s.cfg), s.cfg); };
  runServer(args, runRounds, describe, /*stepLink=*/false);
}

}  // namespace pstrain::exchanges::rounds
