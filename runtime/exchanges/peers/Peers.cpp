#include "runtime/exchanges/peers/Peers.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>
#include <iostream>
#include <optional>
#include <random>

#include "runtime/Stop.h"
#include "runtime/metrics/Clock.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/protocol/StepMessages.h"
#include "runtime/roles/LocalTrainer.h"
#include "runtime/roles/RoleArgs.h"
#include "runtime/roles/UpdateState.h"

namespace pstrain::exchanges::peers {
namespace {

using namespace roles;
using namespace protocol;
using metrics::Clock;
using metrics::secondsSince;

// Rank 0's starting point, told to every rank before anything else: the step it resumes at.
std::int64_t agreeOnStart(comm::Communicator& comm, const checkpoint::Checkpoint* resumeFrom) {
  std::int64_t step = comm.rank() == 0 && resumeFrom ? resumeFrom->step : 0;
  comm.broadcast(&step, sizeof step, 0, "start");
  return step;
}

// Rank 0's update state (a resumed run's) to every rank: the optimizer's names, its updates,
// each buffer, then the loss scale (every rank's updates must skip alike).
void shareUpdateState(UpdateState& s) {
  comm::Communicator& comm = s.comm;
  optim::Optimizer& optimizer = s.optimizer;
  std::string names;
  std::int64_t updates = optimizer.updates();
  if (comm.rank() == 0) {
    for (const auto& [name, buffer] : optimizer.state()) names += name + "\n";
  }
  std::uint64_t size = names.size();
  comm.broadcast(&size, sizeof size, 0, "start (optimizer)");
  names.resize(size);
  comm.broadcast(names.data(), size, 0, "start (optimizer)");
  comm.broadcast(&updates, sizeof updates, 0, "start (optimizer)");
  const auto state = comm.rank() == 0 ? optimizer.state() : std::vector<std::pair<std::string, at::Tensor>>{};
  std::size_t i = 0;
  for (std::size_t at = 0, end; (end = names.find('\n', at)) != std::string::npos; at = end + 1, ++i) {
    at::Tensor buffer = comm.rank() == 0 ? state[i].second : torch::empty_like(s.messages.weights);
    comm.broadcast(buffer.data_ptr(), buffer.numel() * sizeof(float), 0, "start (optimizer)");
    if (comm.rank() != 0) optimizer.restore(names.substr(at, end - at), buffer);
  }
  optimizer.restoreUpdates(updates);
  if (optim::LossScale* lossScale = s.admission.lossScaling()) {
    double scaleAndCount[2] = {lossScale->scale(), static_cast<double>(lossScale->goodSteps())};
    comm.broadcast(scaleAndCount, sizeof scaleAndCount, 0, "start (loss scale)");
    lossScale->restore(scaleAndCount[0], static_cast<std::int64_t>(scaleAndCount[1]));
  }
}

// One peer rank: rank 0's weights, buffers and momentum are broadcast at the start, so every
// rank begins from the same state (and from the checkpoint after a resume).
struct Peer : UpdateState {
  Peer(const RoleArgs& a, std::int64_t firstStep)
      : UpdateState(a.comm, a.cfg, a.model, a.train->size(), firstStep, a.device,
                    a.cfg.seed * 7919u + static_cast<std::uint64_t>(a.comm.rank())) {
    trainer.emplace(cfg, model, *a.train, a.device, messages, comm.rank(), comm.size(), comm.rank());
    if (comm.rank() == 0) {
      readBuffers(model, messages.serverBuffers);
      if (a.resume) restoreUpdate(*this, *a.resume);
    }
    comm.broadcast(messages.down.data(), messages.downBytes(), 0, "start");
    shareUpdateState(*this);
    trainer->loadWeights();
  }
  // After `done` steps: the model keeps its parameters (without gradients), rank 0 writes
  // the final files (the mode's counters, read by the publisher's extras, are still alive).
  void finish(std::int64_t done) {
    trainer.reset();
    if (publisher) publisher->finish(done);
  }
  std::optional<LocalTrainer> trainer;  // reset when training ends
};

void runAllreduce(Peer& p) {
  StepMessages& messages = p.messages;
  std::int64_t step = p.firstStep;
  while (step < p.total) {
    currentStep() = step;
    const double lr = p.lr(step);
    auto exchangeStart = Clock::now();
    p.trainer->computeGradient(step, step, p.admission.lossScale());
    // Rank 0 alone decides when time is up; the sum tells everyone in the same step.
    if (p.publisher && p.publisher->timeToStop(step + 1)) messages.trailer[kStopRequest] = 1;
    p.link->allReduceUp(fmt::format("step {}", step));
    // Every rank's codec time is in its own traffic; the summed trailer's would count it twice.
    messages.trailer[kCodecSeconds] = 0;
    StepStats stats = p.stats(p.computing);
    stats.exchangeSeconds = secondsSince(exchangeStart);
    const bool stop = messages.trailer[kStopRequest] > 0;
    auto updateStart = Clock::now();
    stats.applied = p.apply(lr, p.shards, step);
    stats.gradNorm = p.admission.gradNorm();
    p.trainer->loadWeights();
    stats.updateSeconds = secondsSince(updateStart);
    if (p.publisher) p.publisher->record(step, lr, stats);
    ++step;
    if (stop) break;
  }
  p.finish(step);
}

// The gossip state a rank exposes in its window: weights, buffers, clock, loss, and the
// samples this rank itself trained on (not averaged; read by rank 0 at the end for the run's
// throughput).
struct GossipState {
  explicit GossipState(const StepMessages& m)
      : parameters(m.weights.numel()), buffers(m.serverBuffers.numel()), values(parameters + buffers + 3) {}
  std::size_t parameters, buffers;
  std::vector<float> values;
  float& clock() { return values[parameters + buffers]; }
  float& loss() { return values[parameters + buffers + 1]; }
  float& ownSamples() { return values[parameters + buffers + 2]; }
  float clock() const { return values[parameters + buffers]; }
  float loss() const { return values[parameters + buffers + 1]; }
  at::Tensor weights() { return torch::from_blob(values.data(), {static_cast<std::int64_t>(parameters)}); }
  at::Tensor buffersTensor() {
    return torch::from_blob(values.data() + parameters, {static_cast<std::int64_t>(buffers)});
  }
};

// A gossip rank's averaging with its peers: which peer to read (peers are picked with a
// probability proportional to a score that a slow read halves and a timely one restores,
// so a peer behind a slow link is asked less often), how far to move toward it, and the
// counters of the metrics lines.
class Gossip {
 public:
  explicit Gossip(Peer& p)
      : p_(p),
        rank_(p.comm.rank()),
        interpolation_(p.cfg.gossipInterpolation()),
        window_(p.comm.exposeWindow(GossipState(p.messages).values.size(), "gossip start")),
        mine_(p.messages),
        peer_(p.messages),
        random_(p.cfg.seed * 1000003u + static_cast<std::uint64_t>(rank_)),
        score_(p.comm.size(), 1.0) {
    score_[rank_] = 0;
    publish();
    if (p.publisher) p.publisher->setExtras([this](metrics::JsonObject& line) { addTo(line); });
  }

  // After this rank's own update of `stats.samples` samples.
  void trained(const StepStats& stats) {
    mine_.clock() += static_cast<float>(stats.samples);
    mine_.ownSamples() += static_cast<float>(stats.samples);
    mine_.loss() = static_cast<float>(stats.lossSum / stats.samples);
    publish();
  }

  // With --fetch-probability: reads a peer and moves toward it.
  void maybeAverage(const std::string& context) {
    if (p_.comm.size() < 2 || uniform_(random_) >= p_.cfg.fetchProbability) return;
    std::discrete_distribution<int> pick(score_.begin(), score_.end());
    const int other = pick(random_);
    const auto readStart = Clock::now();
    window_->read(other, peer_.values.data(), context);
    if (secondsSince(readStart) * 1e3 > p_.cfg.peerTimeoutMs) {
      ++slowReads_;
      score_[other] = std::max(0.01, score_[other] * 0.5);
    } else {
      score_[other] = std::min(1.0, score_[other] * 1.25);
    }
    const double f = pull();
    if (!std::isfinite(f) || !std::isfinite(peer_.loss())) return;
    StepMessages& m = p_.messages;
    m.weights.mul_(1 - f).add_(peer_.weights(), f);
    m.serverBuffers.mul_(1 - f).add_(peer_.buffersTensor(), f);
    mine_.clock() = static_cast<float>((1 - f) * mine_.clock() + f * peer_.clock());
    writeBuffers(p_.model, m.serverBuffers);
    publish();
    ++reads_;
    sumF_ += f;
  }

  // Rank 0, at a logged step: how far the models are apart (rank 0 against one peer, in
  // turn), relative to its norm.
  void measureDistance(std::int64_t step, const std::string& context) {
    const int other = 1 + static_cast<int>(((step + 1) / p_.cfg.logEvery) % (p_.comm.size() - 1));
    window_->read(other, peer_.values.data(), context);
    peerDistance_ = (p_.messages.weights - peer_.weights()).norm().item<double>() /
                    std::max(1e-12, p_.messages.weights.norm().item<double>());
  }

  // Once every rank is done (ranks stop at their own pace under --max-seconds or a stop
  // request): rank 0 adds up the samples each one trained on, for an honest throughput.
  void close() {
    const std::string context = "the end of gossip training";
    p_.comm.barrier(context);
    if (rank_ == 0) {
      samplesAllRanks_ = mine_.ownSamples();
      for (int other = 1; other < p_.comm.size(); ++other) {
        window_->read(other, peer_.values.data(), context);
        samplesAllRanks_ += peer_.ownSamples();
      }
      std::cout << fmt::format("pstrain: gossip: {} samples trained by all ranks, {} by rank 0", samplesAllRanks_,
                               mine_.ownSamples()) << std::endl;
    }
    window_->close(context);
  }

 private:
  // How far to move toward the peer just read: --interpolation, damped below
  // --divergence-threshold.
  double pull() const {
    const GossipState& mine = mine_;
    const GossipState& peer = peer_;
    double f = interpolation_.value;
    if (interpolation_.kind == config::TrainConfig::Interpolation::Clock) {
      f = peer.clock() / std::max(1e-9, double(mine.clock()) + peer.clock());
    } else if (interpolation_.kind == config::TrainConfig::Interpolation::Loss) {
      f = mine.loss() / std::max(1e-12, double(mine.loss()) + peer.loss());
    }
    if (p_.cfg.divergenceThreshold > 0 && mine.loss() < p_.cfg.divergenceThreshold) {
      f *= mine.loss() / p_.cfg.divergenceThreshold;
    }
    return f;
  }

  void publish() {
    mine_.weights().copy_(p_.messages.weights);
    mine_.buffersTensor().copy_(p_.messages.serverBuffers);
    window_->publish(mine_.values.data());
  }

  void addTo(metrics::JsonObject& line) {
    line.add("gossip_reads", reads_).add("gossip_slow_reads", slowReads_);
    line.add("gossip_mean_f", reads_ ? sumF_ / reads_ : NAN).add("peer_distance", peerDistance_);
    line.add("clock", static_cast<double>(mine_.clock()));
    if (std::isfinite(samplesAllRanks_)) line.add("samples_all_ranks", samplesAllRanks_);
    reads_ = slowReads_ = 0;
    sumF_ = 0;
  }

  Peer& p_;
  const int rank_;
  const config::TrainConfig::Interpolation interpolation_;
  std::unique_ptr<comm::Window> window_;
  GossipState mine_, peer_;
  std::mt19937_64 random_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
  std::vector<double> score_;
  std::int64_t reads_ = 0, slowReads_ = 0;
  double sumF_ = 0, peerDistance_ = NAN, samplesAllRanks_ = NAN;
};

void runGossip(Peer& p) {
  Gossip gossip(p);
  const auto start = Clock::now();
  std::int64_t step = p.firstStep;
  for (; step < p.total; ++step) {
    if (stopRequested() || (p.cfg.maxSeconds > 0 && secondsSince(start) >= p.cfg.maxSeconds)) break;
    currentStep() = step;
    const std::string context = fmt::format("step {}", step);
    const double lr = p.lr(step);
    const auto stepStart = Clock::now();
    p.trainer->computeGradient(step, step, p.admission.lossScale());
    StepStats stats = p.stats(1);  // this rank's own: alone, an update is a sum over one contributor
    stats.applied = p.apply(lr, 1, step);
    stats.gradNorm = p.admission.gradNorm();
    gossip.trained(stats);
    gossip.maybeAverage(context);
    if (p.publisher && p.comm.size() > 1 && ((step + 1) % p.cfg.logEvery == 0 || step + 1 == p.total)) {
      gossip.measureDistance(step, context);
    }
    p.trainer->loadWeights();
    stats.exchangeSeconds = secondsSince(stepStart);
    if (p.publisher) p.publisher->record(step, lr, stats);
  }
  gossip.close();
  p.finish(step);
}

// Every rank: the start from rank 0's state, rank 0's announcement of the run, then `loop`.
void runPeers(const RoleArgs& args, void (*loop)(Peer&)) {
  const config::RunPlan& cfg = args.cfg;
  Peer peer(args, agreeOnStart(args.comm, args.resume));
  if (args.comm.rank() == 0) {
    std::cout << fmt::format("pstrain: {} mode, {} ranks (all compute), {} steps ({} per epoch), model {} ({}), {}, "
                             "batch {} per rank{}",
                             cfg.modeInfo().name, args.comm.size(), peer.total, peer.updatesPerEpoch, cfg.model,
                             models::describeParameters(args.model), cfg.describeTrainSet(args.train->size()), cfg.describeBatch(),
                             peer.firstStep ? fmt::format("; resuming at step {}", peer.firstStep) : "")
              << std::endl;
  }
  loop(peer);
}

void allreducePeer(const RoleArgs& args) { runPeers(args, runAllreduce); }

void gossipPeer(const RoleArgs& args) { runPeers(args, runGossip); }

// Every rank: the slowest batch, Rabenseifner's all-reduce (a reduce-scatter and an
// all-gather: 2 (n - 1) / n of the gradient over the slowest link, 2 ceil(log2 n)
// latencies), the update; with a codec an all-gather of the payloads (n - 1 of them per rank).
exchanges::StepEstimate allreduceCost(const exchanges::StepCost& c) {
  const exchanges::Links l = exchanges::linksOf(c.m, c.n);
  const int n = c.n;
  const double exchange =
      n == 1  ? 0
      : c.raw ? 2.0 * std::ceil(std::log2(n)) * l.worstLatency + 2.0 * (n - 1) / n * c.grad.bytes / l.slowestBandwidth
              : c.grad.encodeSeconds +
                    (n - 1) * (exchanges::message(c.grad.bytes, l.worstLatency, l.slowestBandwidth) + c.grad.decodeSeconds);
  return {exchanges::kthFastest(c.m, n, n) + exchange + c.m.updateSeconds, n * c.m.batchSamples};
}

// A peer: its whole gradient, its optimizer's state and a codec's residual; no server.
exchanges::Memory memory(const config::RunPlan& cfg, const config::Layout&) {
  exchanges::Memory m;
  m.held = exchanges::weightBytes(cfg) + 4;
  m.worker = exchanges::residualBytes(cfg) + exchanges::stateBytes(cfg);
  return m;
}

}  // namespace
}  // namespace pstrain::exchanges::peers

namespace pstrain::exchanges {

const Exchange kAllReduce = {config::Exchange::AllReduce, nullptr, peers::allreducePeer, peers::allreducePeer, peers::allreduceCost,
                             nullptr, peers::memory};
const Exchange kGossip = {config::Exchange::Gossip, nullptr, peers::gossipPeer, peers::gossipPeer, nullptr, nullptr, peers::memory};

}  // namespace pstrain::exchanges
