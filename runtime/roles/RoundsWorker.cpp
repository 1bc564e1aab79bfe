// A worker of the local-rounds exchange (diloco): rounds of local training between two
// exchanges with rank 0 (ParameterServer.cpp's runRounds).
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>

#include "runtime/Stop.h"
#include "runtime/metrics/Clock.h"
#include "runtime/optim/LrSchedule.h"
#include "runtime/optim/Optimizer.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/protocol/StepLink.h"
#include "runtime/protocol/StepMessages.h"
#include "runtime/roles/LocalTrainer.h"
#include "runtime/roles/SummedUpdate.h"
#include "runtime/roles/Worker.h"

namespace pstrain::roles {

using namespace protocol;

namespace {

// What a round's local steps add up to: the up message's trailer for the round.
struct RoundTotals {
  double lossSum = 0, samples = 0, computeSeconds = 0, dataWaitSeconds = 0;

  // A local step's trailer (LocalTrainer::computeGradient) and whether its update was
  // applied: the loss and samples of one that --skip-nonfinite dropped do not count.
  void add(const float* trailer, int rank, bool applied) {
    computeSeconds += trailer[kComputeSeconds + rank];
    dataWaitSeconds += trailer[kDataWaitSeconds];
    if (!applied) return;
    lossSum += trailer[kLossSum];
    samples += trailer[kSamples];
  }
  // A round in which no step was applied says so (the server then skips it under
  // --skip-nonfinite), with one sample so that the sum stays a count.
  void write(float* trailer, int ranks, int rank, std::int64_t version) const {
    std::fill(trailer, trailer + trailerFloats(ranks), 0.0f);
    trailer[kLossSum] = static_cast<float>(lossSum);
    trailer[kSamples] = static_cast<float>(samples > 0 ? samples : 1);
    trailer[kNonFinite] = samples > 0 ? 0.0f : 1.0f;
    trailer[kDataWaitSeconds] = static_cast<float>(dataWaitSeconds);
    trailer[kVersion] = static_cast<float>(version);
    trailer[kComputeSeconds + rank] = static_cast<float>(computeSeconds);
  }
};

// What a worker's local steps use: its trainer and inner update, its own step messages.
struct Local {
  LocalTrainer& trainer;
  SummedUpdate& update;
  const StepMessages& messages;
  const config::TrainConfig& cfg;
  int rank;
  std::int64_t total;  // the run's steps
};

// The round that starts at the run's step `roundStart` and spans `span` steps: this worker's
// `steps` local steps of it, from its batch `batch` on (advanced), their inner lr following
// the schedule across the span. `progress`: a communicator to let an exchange travel on
// between steps (--overlap-rounds), or null.
RoundTotals trainLocally(const Local& l, std::int64_t roundStart, std::int64_t span, std::int64_t steps,
                         std::int64_t& batch, comm::Communicator* progress) {
  RoundTotals round;
  for (std::int64_t h = 0; h < steps; ++h) {
    const std::int64_t at = roundStart + h * span / steps;
    l.trainer.computeGradient(batch++, at, l.update.lossScale());
    const bool applied = l.update.apply(optim::learningRate(l.cfg, 1, at, l.total), 1, at);
    round.add(l.messages.trailer, l.rank, applied);
    l.trainer.loadWeights();  // on a device: the weights the update changed on the host
    if (progress) progress->progress();
  }
  return round;
}

}  // namespace

// Two sets of messages: `local` is this worker's own training (the model computes from its
// weights, --optimizer steps them, its state kept across rounds as in DiLoCo), `global` the
// exchange with rank 0 (the global weights down, the pseudo-gradient up). A round's
// progress is measured from `base`: the global weights it started from; under
// --overlap-rounds the local weights the round started from, which is where the last round
// ended, while that round's exchange travelled. Its progress is then moved onto the global
// weights that come back (Streaming DiLoCo's one-round delay).
void runRoundsWorker(const RoleArgs& args) {
  const config::TrainConfig& cfg = args.cfg;
  comm::Communicator& comm = args.comm;
  const int rank = comm.rank(), workers = comm.size() - 1;
  const std::int64_t parameters = models::parameterCount(args.model), buffers = bufferCount(args.model);
  StepMessages local(parameters, buffers, comm.size(), args.device);
  StepMessages global(parameters, buffers, comm.size());
  LocalTrainer trainer(cfg, args.model, *args.train, args.device, local, rank - 1, workers, rank);
  const auto inner = optim::makeOptimizer(cfg);
  SummedUpdate update(cfg, *inner, args.model, local);
  StepLink link(comm, cfg, args.model, global, cfg.seed * 7919u + static_cast<std::uint64_t>(rank));
  const std::int64_t total =
      config::totalSteps(cfg, cfg.updatesPerEpoch(trainer.sampler().stepsPerEpoch(), workers));
  const bool overlap = cfg.overlapRounds;
  auto receive = [&](const std::string& context) {
    link.broadcastDown(context);
    return global.header();
  };
  const StepHeader first = receive("the first round");
  if (first.control == Control::Stop) return;
  // The run's step at which this round starts; this worker's next batch of its shard (equal
  // rounds keep it at the run's step, so a resumed run sees the same batches); the local
  // steps rank 0 dealt it (read before the down message can change under an exchange).
  std::int64_t roundStart = first.step, batch = first.step;
  auto dealt = [&] { return static_cast<std::int64_t>(global.shares.data_ptr<float>()[rank]); };
  std::int64_t steps = dealt();
  auto startFromGlobal = [&] {
    local.weights.copy_(global.weights);
    local.serverBuffers.copy_(global.serverBuffers);
    trainer.loadWeights();
  };
  startFromGlobal();
  const at::Tensor base = overlap ? global.weights.clone() : global.weights;
  bool inFlight = false;  // --overlap-rounds: the last round's exchange
  while (roundStart < total) {
    currentStep() = roundStart;
    const std::string context = fmt::format("round at step {}", roundStart);
    // A short last round is dealt evenly (rank 0's rule, which an overlapped worker, its
    // shares a round old, applies itself).
    const std::int64_t span = std::min(cfg.localSteps, total - roundStart);
    const RoundTotals round = trainLocally({trainer, update, local, cfg, rank, total}, roundStart, span,
                                           span < cfg.localSteps ? span : steps, batch, inFlight ? &comm : nullptr);
    const bool exchanged = inFlight;  // the global weights of the last round came back
    if (exchanged) {
      link.finishRoundExchange(context);
      inFlight = false;
      if (global.header().control == Control::Stop) return;  // the run ended (--max-seconds): drop the round
      steps = dealt();
    }
    // Summed over the workers and divided by the summed samples: the sample-weighted mean
    // pseudo-gradient; the buffers, the local model's, are averaged likewise.
    at::sub_out(global.grad, base, local.weights);
    global.workerBuffers.copy_(local.serverBuffers);
    if (exchanged) {
      // This round's progress onto the global weights that came back meanwhile.
      at::sub_out(local.weights, global.weights, global.grad);
      local.serverBuffers.copy_(global.serverBuffers);
      trainer.loadWeights();
    }
    global.grad.mul_(round.samples > 0 ? round.samples : 0.0);
    round.write(global.trailer, comm.size(), rank, roundStart);
    roundStart += span;
    if (overlap) {
      base.copy_(local.weights);
      link.startRoundExchange(context);
      inFlight = true;
      continue;
    }
    link.reduceUp(context);
    if (receive(context).control == Control::Stop) return;
    steps = dealt();
    startFromGlobal();
  }
  // Overlapped: the last round's exchange, whose down message says stop.
  if (inFlight) link.finishRoundExchange("stop");
}

}  // namespace pstrain::roles
