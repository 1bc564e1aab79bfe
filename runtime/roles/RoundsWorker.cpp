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

}  // namespace

// Two sets of messages: `local` is this worker's own training (the model computes from its
// weights, --optimizer steps them, its state kept across rounds as in DiLoCo), `global` the
// exchange with rank 0 (the global weights down, the pseudo-gradient up).
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
  auto receive = [&](const std::string& context) {
    link.broadcastDown(context);
    return global.header();
  };
  // This worker's next batch of its shard: the first round's step, then one per local step
  // (equal rounds keep it at the run's step, so a resumed run sees the same batches).
  std::int64_t batch = -1;
  for (StepHeader header = receive("the first round"); header.control != Control::Stop;) {
    currentStep() = header.step;
    if (batch < 0) batch = header.step;
    const std::string context = fmt::format("round at step {}", header.step);
    // The round spans `span` steps of the run; this worker was dealt `steps` local steps of
    // it, whose inner lr follows the schedule across the span.
    const std::int64_t span = std::min(cfg.localSteps, total - header.step);
    const auto steps = static_cast<std::int64_t>(global.shares.data_ptr<float>()[rank]);
    local.weights.copy_(global.weights);
    local.serverBuffers.copy_(global.serverBuffers);
    trainer.loadWeights();
    RoundTotals round;
    for (std::int64_t h = 0; h < steps; ++h) {
      const std::int64_t at = header.step + h * span / steps;
      trainer.computeGradient(batch++, at);
      const bool applied = update.apply(optim::learningRate(cfg, 1, at, total), 1, at);
      round.add(local.trailer, rank, applied);
      trainer.loadWeights();  // on a device: the weights the update changed on the host
    }
    // Summed over the workers and divided by the summed samples: the sample-weighted mean
    // pseudo-gradient; the buffers, the local model's, are averaged likewise.
    at::sub_out(global.grad, global.weights, local.weights);
    global.grad.mul_(round.samples > 0 ? round.samples : 0.0);
    global.workerBuffers.copy_(local.serverBuffers);
    round.write(global.trailer, comm.size(), rank, header.step);
    link.reduceUp(context);
    header = receive(context);
  }
}

}  // namespace pstrain::roles
