#include "runtime/roles/PeerTraining.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <optional>
#include <random>

#include "data/ShardSampler.h"
#include "runtime/Errors.h"
#include "runtime/optim/LrSchedule.h"
#include "runtime/optim/Sgd.h"
#include "runtime/roles/FlatParameters.h"
#include "runtime/roles/LocalTrainer.h"
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

// Everything one peer rank trains with. Rank 0's weights, buffers, step and momentum are
// broadcast at the start, so every rank begins from the same state (and from the
// checkpoint after a resume).
struct Peer {
  Peer(comm::Communicator& comm, const config::TrainConfig& cfg, models::Net& model, const data::Dataset& train,
       c10::Device device, const checkpoint::Checkpoint* resumeFrom)
      : comm(comm),
        cfg(cfg),
        model(model),
        size(comm.size()),
        shards(cfg.virtualShards > 0 ? cfg.virtualShards : size),
        messages(models::parameterCount(model), bufferCount(model), comm.size(), device),
        link(comm, cfg, model, messages, cfg.seed * 7919u + static_cast<std::uint64_t>(comm.rank())),
        updatesPerEpoch(data::ShardSampler(train.size(), shards, cfg.batchSize, cfg.seed).stepsPerEpoch()),
        total(config::totalSteps(cfg, updatesPerEpoch)),
        sgd({cfg.momentum, cfg.weightDecay, cfg.nesterov}) {
    trainer.emplace(cfg, model, train, device, messages, comm.rank(), comm.size(), comm.rank());
    std::int64_t hasMomentum = 0;
    if (comm.rank() == 0) {
      readBuffers(model, messages.serverBuffers);
      if (resumeFrom) {
        restoreMomentum(sgd, model, *resumeFrom);
        hasMomentum = sgd.momentumBuffer().defined() ? 1 : 0;
      }
      messages.setHeader({resumeFrom ? resumeFrom->step : 0, 0, Control::Train, 0, hasMomentum});
    }
    comm.broadcast(messages.down.data(), messages.downBytes(), 0, "start");
    const StepHeader header = messages.header();
    firstStep = header.step;
    if (header.reserved) {
      at::Tensor momentum = comm.rank() == 0 ? sgd.momentumBuffer() : torch::empty_like(messages.weights);
      comm.broadcast(momentum.data_ptr(), momentum.numel() * sizeof(float), 0, "start (momentum)");
      sgd.setMomentumBuffer(momentum);
    }
    trainer->loadWeights();
    if (comm.rank() == 0) publisher.emplace(cfg, model, sgd, updatesPerEpoch, total, firstStep);
  }

  comm::Communicator& comm;
  const config::TrainConfig& cfg;
  models::Net& model;
  const int size;
  const int shards;  // virtual shards of a step's global batch (allreduce; gossip: one per rank)
  StepMessages messages;
  StepLink link;
  const std::int64_t updatesPerEpoch;
  const std::int64_t total;
  std::int64_t firstStep = 0;
  optim::Sgd sgd;
  std::optional<LocalTrainer> trainer;  // reset when training ends
  std::optional<Publisher> publisher;    // rank 0
};

// After `done` steps: the model keeps its parameters (without gradients), rank 0 writes the
// final files.
// The mode's counters (read by the publisher's extras) are still alive here.
void finish(Peer& p, std::int64_t done) {
  p.trainer.reset();
  if (p.publisher) p.publisher->finish(done);
}

void runAllreduce(Peer& p) {
  StepMessages& messages = p.messages;
  std::int64_t step = p.firstStep;
  while (step < p.total) {
    currentStep() = step;
    const double lr = optim::learningRate(p.cfg, p.cfg.batchesPerUpdate(p.shards), step, p.total);
    auto exchangeStart = Clock::now();
    p.trainer->computeGradient(step, step);
    // Rank 0 alone decides when time is up; the sum tells everyone in the same step.
    if (p.publisher && p.publisher->timeToStop()) messages.trailer[kStopRequest] = 1;
    p.link.allReduceUp(fmt::format("step {}", step));
    StepStats stats = summedStats(messages, p.size);
    stats.exchangeSeconds = secondsSince(exchangeStart);
    const StepLink::Traffic traffic = p.link.take();
    stats.bytesUp = traffic.bytesUp;
    stats.rawBytesUp = traffic.rawBytesUp;
    stats.codecSeconds = traffic.codecSeconds;
    const bool stop = messages.trailer[kStopRequest] > 0;
    auto updateStart = Clock::now();
    stats.applied = applySummedUpdate(messages, p.sgd, lr, p.shards, p.model, p.cfg, step);
    p.trainer->loadWeights();
    stats.updateSeconds = secondsSince(updateStart);
    if (p.publisher) p.publisher->record(step, lr, stats);
    ++step;
    if (stop) break;
  }
  finish(p, step);
}

// The gossip state a rank exposes: weights, buffers, clock, loss, and the samples this rank
// itself trained on (not averaged; read by rank 0 at the end for the run's throughput).
struct GossipState {
  explicit GossipState(const StepMessages& m)
      : parameters(m.weights.numel()), buffers(m.serverBuffers.numel()), values(parameters + buffers + 3) {}
  std::size_t parameters, buffers;
  std::vector<float> values;
  float& clock() { return values[parameters + buffers]; }
  float& loss() { return values[parameters + buffers + 1]; }
  float& ownSamples() { return values[parameters + buffers + 2]; }
  at::Tensor weights() { return torch::from_blob(values.data(), {static_cast<std::int64_t>(parameters)}); }
  at::Tensor buffersTensor() {
    return torch::from_blob(values.data() + parameters, {static_cast<std::int64_t>(buffers)});
  }
};

void runGossip(Peer& p) {
  StepMessages& messages = p.messages;
  const int rank = p.comm.rank();
  const auto interpolation = p.cfg.gossipInterpolation();
  auto window = p.comm.exposeWindow(GossipState(messages).values.size(), "gossip start");
  GossipState mine(messages), peer(messages);
  auto publish = [&] {
    mine.weights().copy_(messages.weights);
    mine.buffersTensor().copy_(messages.serverBuffers);
    window->publish(mine.values.data());
  };
  publish();

  // Peers are picked with probability proportional to a score that a slow read halves and
  // a timely one restores, so a peer behind a slow link is asked less often.
  std::mt19937_64 random(p.cfg.seed * 1000003u + static_cast<std::uint64_t>(rank));
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<double> score(p.size, 1.0);
  score[rank] = 0;
  auto pickPeer = [&] {
    std::discrete_distribution<int> pick(score.begin(), score.end());
    return pick(random);
  };
  std::int64_t reads = 0, slowReads = 0;
  double sumF = 0, peerDistance = NAN, samplesAllRanks = NAN;
  auto extras = [&](metrics::JsonObject& line) {
    line.add("gossip_reads", reads).add("gossip_slow_reads", slowReads);
    line.add("gossip_mean_f", reads ? sumF / reads : NAN).add("peer_distance", peerDistance);
    line.add("clock", static_cast<double>(mine.clock()));
    if (std::isfinite(samplesAllRanks)) line.add("samples_all_ranks", samplesAllRanks);
    reads = slowReads = 0;
    sumF = 0;
  };
  if (p.publisher) p.publisher->setExtras(extras);

  const auto start = Clock::now();
  std::int64_t step = p.firstStep;
  for (; step < p.total; ++step) {
    if (stopRequested() || (p.cfg.maxSeconds > 0 && secondsSince(start) >= p.cfg.maxSeconds)) break;
    currentStep() = step;
    const std::string context = fmt::format("step {}", step);
    const double lr = optim::learningRate(p.cfg, p.cfg.batchesPerUpdate(p.size), step, p.total);
    auto stepStart = Clock::now();
    p.trainer->computeGradient(step, step);
    StepStats stats = summedStats(messages, 1);  // this rank's own
    // Alone, a rank's update is a sum over one contributor.
    stats.applied = applySummedUpdate(messages, p.sgd, lr, 1, p.model, p.cfg, step);
    mine.clock() += static_cast<float>(stats.samples);
    mine.ownSamples() += static_cast<float>(stats.samples);
    mine.loss() = static_cast<float>(stats.lossSum / stats.samples);
    publish();

    const bool logStep = rank == 0 && ((step + 1) % p.cfg.logEvery == 0 || step + 1 == p.total);
    if (p.size > 1 && uniform(random) < p.cfg.fetchProbability) {
      const int other = pickPeer();
      auto readStart = Clock::now();
      window->read(other, peer.values.data(), context);
      const double readMs = secondsSince(readStart) * 1e3;
      if (readMs > p.cfg.peerTimeoutMs) {
        ++slowReads;
        score[other] = std::max(0.01, score[other] * 0.5);
      } else {
        score[other] = std::min(1.0, score[other] * 1.25);
      }
      double f = interpolation.value;
      if (interpolation.kind == config::TrainConfig::Interpolation::Clock) {
        f = peer.clock() / std::max(1e-9, double(mine.clock()) + peer.clock());
      } else if (interpolation.kind == config::TrainConfig::Interpolation::Loss) {
        f = mine.loss() / std::max(1e-12, double(mine.loss()) + peer.loss());
      }
      if (p.cfg.divergenceThreshold > 0 && mine.loss() < p.cfg.divergenceThreshold) {
        f *= mine.loss() / p.cfg.divergenceThreshold;
      }
      if (std::isfinite(f) && std::isfinite(peer.loss())) {
        messages.weights.mul_(1 - f).add_(peer.weights(), f);
        messages.serverBuffers.mul_(1 - f).add_(peer.buffersTensor(), f);
        mine.clock() = static_cast<float>((1 - f) * mine.clock() + f * peer.clock());
        writeBuffers(p.model, messages.serverBuffers);
        publish();
        ++reads;
        sumF += f;
      }
    }
    if (logStep && p.size > 1) {
      // How far apart the models are: rank 0 against one peer (in turn), relative to its norm.
      const int other = 1 + static_cast<int>(((step + 1) / p.cfg.logEvery) % (p.size - 1));
      window->read(other, peer.values.data(), context);
      peerDistance = (messages.weights - peer.weights()).norm().item<double>() /
                     std::max(1e-12, messages.weights.norm().item<double>());
    }
    p.trainer->loadWeights();
    stats.exchangeSeconds = secondsSince(stepStart);
    if (p.publisher) p.publisher->record(step, lr, stats);
  }
  // Every rank is done (ranks stop at their own pace under --max-seconds or a stop
  // request): rank 0 adds up the
  // samples each one trained on, for an honest throughput.
  p.comm.barrier("the end of gossip training");
  if (rank == 0) {
    samplesAllRanks = mine.ownSamples();
    for (int other = 1; other < p.size; ++other) {
      window->read(other, peer.values.data(), "the end of gossip training");
      samplesAllRanks += peer.ownSamples();
    }
    std::cout << fmt::format("pstrain: gossip: {} samples trained by all ranks, {} by rank 0", samplesAllRanks,
                             mine.ownSamples()) << std::endl;
  }
  window->close("the end of gossip training");
  finish(p, step);
}

}  // namespace

void runPeers(comm::Communicator& comm, const config::TrainConfig& cfg, models::Net& model,
              const data::Dataset& train, c10::Device device, const checkpoint::Checkpoint* resumeFrom) {
  Peer peer(comm, cfg, model, train, device, resumeFrom);
  if (comm.rank() == 0) {
    std::cout << fmt::format("pstrain: {} mode, {} ranks (all compute), {} steps ({} per epoch), model {} ({} "
                             "parameters), {} train samples, batch {} per rank{}",
                             cfg.mode, peer.size, peer.total, peer.updatesPerEpoch, cfg.model,
                             peer.messages.weights.numel(), train.size(), cfg.batchSize,
                             peer.firstStep ? fmt::format("; resuming at step {}", peer.firstStep) : "")
              << std::endl;
  }
  if (cfg.mode == "gossip") {
    runGossip(peer);
  } else {
    runAllreduce(peer);
  }
}

}  // namespace pstrain::roles
