// A worker of the local-rounds exchange (diloco): rounds of local training between two
// exchanges with rank 0 (RoundsServer.cpp), the exchange passed along the chain of workers
// (RoundChain.h).
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <optional>

#include "runtime/Stop.h"
#include "runtime/config/Layout.h"
#include "runtime/config/MemoryPolicy.h"
#include "runtime/exchanges/rounds/RoundChain.h"
#include "runtime/exchanges/rounds/Rounds.h"
#include "runtime/exchanges/rounds/RoundsPlan.h"
#include "runtime/metrics/Clock.h"
#include "runtime/optim/LrSchedule.h"
#include "runtime/optim/Optimizer.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/protocol/StepMessages.h"
#include "runtime/roles/LocalTrainer.h"
#include "runtime/roles/RoleArgs.h"
#include "runtime/roles/SummedStep.h"

namespace pstrain::exchanges::rounds {

using namespace roles;

using namespace protocol;

namespace {

// What a round's local steps add up to: the up message's trailer for the round. Its compute
// is the local steps' wall time: batches, forward and backward, the inner steps, and the
// exchange's progress between steps; not the wait for the last round's exchange at the
// round's end. So rank 0 sees a worker's speed as a round spends it (--balance deals by it),
// and a round's period beyond its slowest worker's compute is what the workers waited
// (RoundsPlan.h's raisedLocalSteps): a sum of forward-backward times left out the inner
// steps, which alone made 20-step rounds at 10 Mbit/s look 10% over their compute.
struct RoundTotals {
  double lossSum = 0, samples = 0, computeSeconds = 0, dataWaitSeconds = 0;

  // A local step's trailer (LocalTrainer::computeGradient) and whether its update was
  // applied: the loss and samples of one that --skip-nonfinite dropped do not count.
  void add(const float* trailer, bool applied) {
    dataWaitSeconds += trailer[kDataWaitSeconds];
    if (!applied) return;
    lossSum += trailer[kLossSum];
    samples += trailer[kSamples];
  }
  // A round in which no step was applied: under loss scaling this worker's scale skipped
  // each of them (said here), so its pseudo-gradient is zero and weighs nothing (0 samples;
  // the server skips the outer step when no worker has any). Otherwise it says so, with one
  // sample so that the sum stays a count, and the server skips the round (--skip-nonfinite).
  void write(float* trailer, int ranks, int rank, std::int64_t version, bool lossScaling) const {
    std::fill(trailer, trailer + trailerFloats(ranks), 0.0f);
    trailer[kLossSum] = static_cast<float>(lossSum);
    const bool finite = samples > 0 || lossScaling;
    trailer[kSamples] = static_cast<float>(finite ? samples : 1);
    trailer[kNonFinite] = finite ? 0.0f : 1.0f;
    trailer[kDataWaitSeconds] = static_cast<float>(dataWaitSeconds);
    trailer[kVersion] = static_cast<float>(version);
    trailer[kComputeSeconds + rank] = static_cast<float>(computeSeconds);
  }
};

// A worker's state across rounds. Two sets of messages: `local` is this worker's own
// training (the model computes from its weights, --optimizer steps them, its state kept
// across rounds as in DiLoCo), `global` the exchange with rank 0: its weights are this
// worker's copy of the global weights (equal bit for bit to the server's; bfloat16 under a
// lossy down codec), its gradient the pseudo-gradient going up when rounds overlap. A
// round's progress is measured from `base`: the global weights it started from; in an
// overlapped round, the local weights it started from (where the last round ended, while
// that round's exchange travelled) until the new global weights are in, when its progress
// moves onto them (rebase()). Streamed rounds (RoundsPlan.h) exchange one fragment each, on
// its lane: its pseudo-gradient is measured from the fragment's own base, the global weights
// of its last exchange, or the local ones at its send until that exchange's are in.
class RoundsWorker {
 public:
  explicit RoundsWorker(const RoleArgs& args)
      : cfg_(args.cfg),
        memory_(cfg_),
        comm_(args.comm),
        rank_(comm_.rank()),
        plan_(roundsPlanOf(cfg_)),
        local_(models::parameterCount(args.model), bufferCount(args.model), comm_.size(), args.device),
        // Under a lossy down codec the copy of the global weights is bfloat16 (RoundChain.h).
        global_(models::parameterCount(args.model), bufferCount(args.model), comm_.size(), c10::kCPU,
                /*bf16Weights=*/!config::isLossless(plan_.codecs.down)),
        trainer_(cfg_, args.model, *args.train, args.device, local_, layout().workerIndex(rank_), layout().workers(),
                 rank_),
        model_(args.model),
        admission_(cfg_),
        inner_(cfg_, {0, local_.weights.numel(), parameterShapes(args.model)}, local_.weights,
               parameterShapes(args.model), false, local_.grad),
        downFixed_(kDecisionFloats + kHeaderFloats + static_cast<std::size_t>(global_.downTail.numel())),
        // Seeded by the worker's place (1 for the first): the same codes whatever the servers.
        lanes_(roundLanes(comm_, args.model, cfg_, static_cast<std::int64_t>(global_.up.size()) - global_.weights.numel(),
                          static_cast<std::int64_t>(downFixed_.size()), plan_.codecs,
                          cfg_.seed * 7919u + static_cast<std::uint64_t>(layout().workerIndex(rank_) + 1))),
        schedule_(plan_.fragments),
        total_(config::totalSteps(cfg_, cfg_.updatesPerEpoch(trainer_.sampler().stepsPerEpoch(), layout().workers()))) {
    // Backward writes the gradient into local_.grad bucket by bucket, dropping autograd's own
    // copies as it goes; after each local step local_.grad's pages are given back
    // (trainLocally), so that the gradient takes memory only from backward to the step, when
    // the activations are mostly gone, not beside them through the forward pass.
    trainer_.streamGradients(gradientBuckets(args.model, cfg_.bucketKb * 1024), [](const Bucket&) {});
  }

  void run() {
    // Where every worker's initial weights are the server's, bit for bit (the handshake
    // found them so), the first down message leaves them out: each worker's copy is its own.
    if (cfg_.workersHoldWeights) global_.weights.copy_(local_.weights.to(at::kCPU));  // (rounded as roundToCopy does)
    receiveDown(/*delta=*/nullptr, "the first round");
    if (header().control == Control::Stop) return;
    // The run's step at which this round starts; this worker's next batch of its shard
    // (equal rounds keep it at the run's step, so a resumed run sees the same batches).
    std::int64_t roundStart = header().step, batch = header().step;
    std::int64_t steps = dealt();
    startFromGlobal();
    while (roundStart < total_) {
      currentStep() = roundStart;
      const std::string context = fmt::format("round at step {}", roundStart);
      // A short last round is dealt evenly (rank 0's rule, which an overlapped worker, its
      // shares a round old, applies itself).
      const std::int64_t H = decision_.localSteps;
      const std::int64_t span = std::min(H, total_ - roundStart);
      const RoundTotals round = trainLocally(roundStart, span, span < H ? span : steps, batch);
      if (inFlight_) {  // the last round's exchange: all of it in before this round's goes
        flying_->chain->finish();
        inFlight_ = false;
        if (!rebased_) rebase();
        if (header().control == Control::Stop) return finishWithGlobal();  // the run ended: drop the round
        steps = dealt();
      }
      Lane& lane = enterLane(schedule_.next(decision_, roundStart + span >= total_));
      // Summed over the workers and divided by the summed samples: the sample-weighted mean
      // pseudo-gradient; the buffers, the local model's, are averaged likewise. What error
      // feedback kept of the lane's last round is weighted as this round's: the server
      // divides by this round's samples, which grow with its length.
      if (lane.lastSpan > 0) lane.chain->scaleUpResidual(static_cast<double>(span) / static_cast<double>(lane.lastSpan));
      lane.lastSpan = span;
      // The pseudo-gradient goes up from where the local weights were: they are not used
      // again before the global weights replace them, unless the next round trains on
      // while this exchange travels (then global_.up holds it). Same arithmetic either way.
      at::Tensor delta = (decision_.overlap ? global_.grad : local_.weights).narrow(0, lane.begin, lane.count);
      at::sub_out(delta, base().narrow(0, lane.begin, lane.count), local_.weights.narrow(0, lane.begin, lane.count));
      delta.mul_(round.samples > 0 ? round.samples : 0.0);
      global_.workerBuffers.copy_(local_.serverBuffers);
      round.write(global_.trailer, comm_.size(), rank_, roundStart, cfg_.lossScaling());
      roundStart += span;
      if (decision_.overlap) {
        if (!overlappedBase_.defined()) overlappedBase_ = torch::empty_like(local_.weights).copy_(global_.weights);
        overlappedBase_.narrow(0, lane.begin, lane.count).copy_(local_.weights.narrow(0, lane.begin, lane.count));
        flying_ = &lane;
        lane.chain->startWorker(delta.data_ptr<float>(), global_.up.data() + global_.weights.numel(),
                                globalCopy(lane.begin), downFixed_.data(), context);
        inFlight_ = true;
        rebased_ = false;
        continue;
      }
      receiveDown(local_.weights.data_ptr<float>(), context);
      if (header().control == Control::Stop) return finishWithGlobal();
      steps = dealt();
      startFromGlobal();
    }
    if (inFlight_) {  // overlapped: the last round's exchange, whose down message says stop
      flying_->chain->finish();
      takeDownFixed();
    }
    finishWithGlobal();
  }

 private:
  // Which ranks serve and which compute (cfg_ and comm_ are set before anything that asks).
  config::Layout layout() const { return config::Layout(cfg_, comm_.size()); }

  const StepHeader& header() const { return header_; }
  // The local steps rank 0 dealt this worker.
  std::int64_t dealt() const { return static_cast<std::int64_t>(global_.shares.data_ptr<float>()[rank_]); }
  const at::Tensor& base() const { return overlappedBase_.defined() ? overlappedBase_ : global_.weights; }
  // The copy of the global weights from float `begin` on.
  GlobalCopy globalCopy(std::int64_t begin = 0) {
    if (global_.weights.scalar_type() == at::kBFloat16) {
      return {nullptr, reinterpret_cast<std::uint16_t*>(global_.weights.data_ptr()) + begin};
    }
    return {global_.weights.data_ptr<float>() + begin, nullptr};
  }

  // A whole exchange of the whole model: this worker's pseudo-gradient `delta` up (null:
  // none, the first round's), with global_.up's fixed part, then the down message in.
  void receiveDown(const float* delta, const std::string& context) {
    RoundChain& chain = *lanes_[0].chain;
    chain.startWorker(delta, delta ? global_.up.data() + global_.weights.numel() : nullptr, globalCopy(),
                      downFixed_.data(), context, /*weightsHeld=*/!delta && cfg_.workersHoldWeights);
    chain.finish();
    takeDownFixed();
  }
  // The down message's header, buffers and shares into global_.
  void takeDownFixed() {
    decision_ = readDecision(downFixed_.data());
    const auto header = downFixed_.begin() + kDecisionFloats;
    std::copy(header, header + kHeaderFloats, global_.down.data());
    std::copy(header + kHeaderFloats, downFixed_.end(), global_.downTail.data_ptr<float>());
    header_ = global_.header();
  }
  void startFromGlobal() {
    local_.weights.copy_(global_.weights);
    local_.serverBuffers.copy_(global_.serverBuffers);
    trainer_.loadWeights();
  }
  // The lane `index` for this round's exchange. Where the rounds move between the whole
  // model's lane and the fragments', the lanes left give their error feedback's memory back
  // (what they held back is dropped: under a code per weight, once or twice a run), so that a
  // worker holds one model's residual, as without fragments.
  Lane& enterLane(std::size_t index) {
    if ((index == 0) != (lane_ == 0)) {
      for (std::size_t i = 0; i < lanes_.size(); ++i) {
        if ((i == 0) == (lane_ == 0)) lanes_[i].chain->dropUpResidual();
      }
    }
    lane_ = index;
    return lanes_[index];
  }

  // Overlapped: the new global weights of the lane in flight are in; this round's progress
  // so far on them moves onto them.
  void rebase() {
    takeDownFixed();
    const std::int64_t begin = flying_->begin, count = flying_->count;
    at::Tensor global = global_.weights.narrow(0, begin, count), base = overlappedBase_.narrow(0, begin, count);
    local_.weights.narrow(0, begin, count).add_(global).sub_(base);
    base.copy_(global);
    local_.serverBuffers.copy_(global_.serverBuffers);
    trainer_.loadWeights();
    rebased_ = true;
  }
  // The end of the run: this worker holds the final global weights, as rank 0 does.
  void finishWithGlobal() { startFromGlobal(); }

  // The round that starts at the run's step `roundStart` and spans `span` steps: this
  // worker's `steps` local steps of it, from its batch `batch` on (advanced), their inner lr
  // following the schedule across the span. An exchange in flight moves on between steps,
  // and its progress moves onto the global weights as soon as they are in.
  RoundTotals trainLocally(std::int64_t roundStart, std::int64_t span, std::int64_t steps, std::int64_t& batch) {
    RoundTotals round;
    const auto start = metrics::Clock::now();
    for (std::int64_t h = 0; h < steps; ++h) {
      const std::int64_t at = roundStart + h * span / steps;
      trainer_.computeGradient(batch++, at, admission_.lossScale());
      const double lr = optim::learningRate(cfg_, 1, at, total_);
      const bool applied = applySummed(admission_, inner_, local_, model_, lr, 1, at);
      if (memory_.givesPagesBack()) local_.up.release(0, local_.grad.numel());
      round.add(local_.trailer, applied);
      trainer_.loadWeights();  // on a device: the weights the update changed on the host
      if (inFlight_ && !rebased_) {
        flying_->chain->advance();
        if (flying_->chain->downArrived()) rebase();
      }
    }
    round.computeSeconds = metrics::secondsSince(start);
    return round;
  }

  const config::RunPlan& cfg_;
  const config::MemoryPolicy memory_;  // whether the local gradient's pages go back after each step
  comm::Communicator& comm_;
  const int rank_;
  const RoundsPlan plan_;
  StepMessages local_, global_;
  LocalTrainer trainer_;
  models::Net& model_;
  Admission admission_;  // the inner steps' (their loss scale)
  RangeUpdate inner_;    // the local steps: --optimizer on the local weights
  std::vector<float> downFixed_;  // the down message's decision, header, buffers and shares as they arrive
  std::vector<Lane> lanes_;       // the whole model's chain, and the streamed fragments'
  LaneSchedule schedule_;
  Lane* flying_ = nullptr;        // the lane of the exchange in flight (overlapped)
  std::size_t lane_ = 0;          // of the last exchange
  RoundsDecision decision_;       // the latest from the server: the next round's H, overlap, fragments
  StepHeader header_;
  const std::int64_t total_;  // the run's steps
  at::Tensor overlappedBase_;  // overlapped rounds: where this round's progress is measured from
  bool inFlight_ = false, rebased_ = false;
};

}  // namespace

void runRoundsWorker(const RoleArgs& args) { RoundsWorker(args).run(); }

}  // namespace pstrain::exchanges::rounds
