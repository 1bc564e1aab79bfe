#pragma once
// What K servers (--servers) share whatever carries the workers' messages (the K servers'
// channels, Wire.h, or diloco's chain, rounds/RoundChain.h): the key ranges, server
// k's update of its key range (Ranges.h), and the lead messages between server 0 and the
// others: the start-up's ranges, each step's (or round's) Partial and Verdict, and a
// checkpoint's ranges gathered on server 0. Server 0 decides alone what needs the whole
// gradient (skip, clip, stop) from the servers' partial sums: one scalar each for the norm,
// one flag for finiteness.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/Registry.h"
#include "runtime/Parts.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/comm/Communicator.h"
#include "runtime/comm/Values.h"
#include "runtime/config/TrainConfig.h"
#include "runtime/exchanges/Ranges.h"
#include "runtime/metrics/Json.h"
#include "runtime/optim/Optimizer.h"
#include "runtime/protocol/StepMessages.h"
#include "runtime/roles/SummedUpdate.h"

namespace pstrain::roles {
struct Server;
struct StepStats;
}

namespace pstrain::exchanges {

// The run's key ranges of `model`'s parameters, one per server (Ranges.h): whole tensors
// where rangesKeepTensorsWhole(cfg).
std::vector<KeyRange> serverRanges(const models::Net& model, const config::TrainConfig& cfg);
// Whether the ranges keep tensors whole: a gradient or a weight codec's frames and scales are
// per tensor, and so stay one server's.
bool rangesKeepTensorsWhole(const config::TrainConfig& cfg);

// Server k's word on a step, to server 0.
struct Partial {
  double sumOfSquares = 0;  // of its range of the summed gradient
  double finite = 1;        // 1 when every value of that range is finite
  double updateSeconds = 0; // its last update's
  double bytesOut = 0;      // its link's bytes per step, each way: the weights it sent,
  double bytesIn = 0;       // the gradients it received
  double peakRssMib = 0;
};

// What a server that updates each part on arrival (cfg.updatesOnArrival()) must know
// before a step's gradients come: its lr and its sample count (the gradient's divisor).
struct StepPlan {
  double lr = 0, samples = 0;
};

// Server 0's word to every server: apply the update (with lr and the gradient's divisor:
// the step's samples over the clipping factor), send a checkpoint's state, and whether the
// next down message trains or stops.
struct Verdict {
  double apply = 0, lr = 0, divisor = 1, gather = 0, train = 0;
  double step = 0;  // the step it is of (the first of a round's), for messages
  StepPlan next;    // of the next step, when it trains
};


// One server's key range: its weights, the workers' summed gradient of it, and the update
// rule (cfg.updateRule(): the optimizer, or diloco's outer one) with its slice of the state.
// With `eachPart` (cfg.updatesOnArrival()) there is no sum of the whole range: the
// caller sums each part and applyPart() updates it at once; apply() then does nothing.
class RangeUpdate {
 public:
  // `weights`: range.size() floats (server 0's: a view of the whole model's flat weights, so
  // that its checkpoints need no copy of its own range); `modelShapes`: the model's tensors'
  // shapes, in order (the range's rule works out its part of them: optim::makeOptimizer).
  RangeUpdate(const config::TrainConfig& cfg, KeyRange range, at::Tensor weights, const codec::Shapes& modelShapes,
              bool eachPart = false);

  const KeyRange& range() const { return range_; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  const optim::Optimizer& optimizer() const { return *optimizer_; }
  const at::Tensor& weights() const { return weights_; }
  float* sum() { return sum_.data(); }  // range().size() floats; none with eachPart
  bool eachPart() const { return eachPart_; }

  // The summed gradient's word to server 0, with this server's traffic (bytes per worker,
  // each way) and its update's seconds (takeUpdateSeconds(): the last step's, or with
  // eachPart this one's).
  Partial partial(double updateSeconds, double bytesOut, double bytesIn) const;
  // The verdict's update of this range; throws naming `step` and `rank` when it leaves a
  // weight non-finite.
  void apply(const Verdict& v, std::int64_t step, int rank);
  // With eachPart: beginParts() starts a step's update (counts it, for Adam's bias
  // correction, and zeroes the norm's sum); then applyPart() updates floats [at, at + n) of
  // the range from `sum` (the workers' summed gradient of them; scratch), by `plan`, once
  // per part, in any order (they come last first), so that one step over every part equals
  // one over the range. Throws as apply() does.
  void beginParts();
  void applyPart(float* sum, std::int64_t at, std::int64_t n, const StepPlan& plan, std::int64_t step, int rank);
  // The seconds apply() and applyPart() took since the last call.
  double takeUpdateSeconds();

 private:
  const config::TrainConfig rule_;
  const KeyRange range_;
  const bool eachPart_;
  at::Tensor weights_;
  protocol::FloatBuffer sum_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  double partSumOfSquares_ = 0;  // eachPart: of this step's parts so far
  double updateSeconds_ = 0;  // since takeUpdateSeconds()
};

// --- the lead messages: small, blocking, one at a time -----------------------------------------

using comm::expectBytes;  // comm/Values.h
using comm::receiveValue;
using comm::sendValue;

// Point to point: server 0's word to the others on each tail it takes (Wire.h), or at the end.
struct Arrival {
  enum Kind : std::int64_t {
    Accept,  // `worker`'s gradient joins the coming update (the first one of it: its sum)
    Stale,   // `worker`'s gradient is dropped, and the worker gets the weights as they are
    Stop,    // the run ends: the workers whose gradient is in get the last weights (and the
             // last checkpoint is gathered)
    Drain,   // after Stop: as Stale, with the last weights
    End,     // nothing follows
  };
  std::int64_t kind = End;
  std::int64_t worker = -1;
};

// Server 0's first word to the others: the first step, whether the run trains, and whether
// their ranges of the weights follow (startSendsWeights; else each takes its own from its
// model).
struct Start {
  std::int64_t firstStep = 0;
  std::int64_t train = 0;
  StepPlan plan;  // of the first step
  std::int64_t weightsFollow = 0;
};

// Whether server 0 sends the other servers their ranges of the starting weights: a resumed
// run's, or a zoo model's (rank 0's weights, whatever the others drew). A model file's are
// the file's on every rank (the handshake compared its checksum): each server reads its own
// range of it and no more (training::weightsNeeded).
bool startSendsWeights(const roles::Server& s);

// Server 0 at start-up: tells every other server `start`, its range of `weights` (the whole
// model's flat floats) if start.weightsFollow, and of `whole`'s state (the initial or
// resumed model), and sets `own` (range 0's update) to range 0 of that state.
void sendStarts(comm::Communicator& comm, const std::vector<KeyRange>& ranges, const Start& start,
                const at::Tensor& weights, const optim::Optimizer& whole, optim::Optimizer& own);
// Server k at start-up: the Start, and its range of the weights (server 0's, or `model`'s)
// and state into `update`. Then the model's weights go (releaseWeights).
Start receiveStart(comm::Communicator& comm, RangeUpdate& update, models::Net& model);

// Server 0: every server's Partial into `partials` (its own is partials[0]), and the verdict
// `v` (its lr, gather and train set) told to every server, with its divisor from
// SummedUpdate's rules over the whole gradient, unless they skip the update (or v.apply is 0
// already: skipped without asking). Sets `gradNorm` when applied.
Verdict decide(comm::Communicator& comm, roles::SummedUpdate& update, std::vector<Partial>& partials,
               std::int64_t step, Verdict v, double& gradNorm);
// Server k: its Partial to server 0, and server 0's Verdict.
Verdict receiveVerdict(comm::Communicator& comm, const Partial& partial, const std::string& context);

// A checkpoint, on server 0: the model's weights and the optimizer state come from every
// server 4 MiB at a time, as the Publisher writes them (the trained TorchScript module too),
// so that server 0 never holds more of either than its own range and one chunk. The model's
// floats outside range 0 and `whole` (the Publisher's optimizer) are placeholders: buffers of
// the whole model's size that nothing writes (pages untouched or given back take no memory;
// read, they are zeros), whose bytes recordSource() gives.
class CheckpointGather {
 public:
  // `own`: range 0's update.
  CheckpointGather(comm::Communicator& comm, std::vector<KeyRange> ranges, optim::Optimizer& whole, RangeUpdate& own);
  // The checkpoint of the step just updated: `model` (the whole model's flat floats, which
  // the Publisher's model views; range 0 real) and the placeholders into `whole`; the servers
  // then answer recordSource() until release(). Release after the
  // Publisher's record() of the step, or after its finish() at the end.
  void gather(float* model, const std::string& context);
  // checkpoint::RecordSource: a placeholder's bytes (weights or state), from range 0's and,
  // a chunk at a time, the servers'; false for memory within range 0 of the model, which
  // holds its own, and for memory that is neither.
  bool recordSource(const void* data, std::size_t bytes, const checkpoint::RecordWrite& write);
  // After the Publisher wrote what it reads (a no-op when nothing was gathered): the servers go on.
  void release();

 private:
  // Floats [begin, end) of `k`'s range of state `state` (kWeights: the model) into `out`.
  void request(std::size_t k, std::int64_t state, std::int64_t begin, std::int64_t end, float* out);

  comm::Communicator& comm_;
  const std::vector<KeyRange> ranges_;
  optim::Optimizer& whole_;
  RangeUpdate& own_;
  float* model_ = nullptr;                // the last gather()'s
  std::vector<at::Tensor> placeholders_;  // by state, of the whole model's size
  static constexpr std::int64_t kChunkFloats = kPartFloats;  // a request
  std::vector<float> chunk_;              // recordSource()'s, while serving
  bool serving_ = false;
};
// Server k at a checkpoint: tells server 0 its optimizer state's names, then, once its next
// down message is sent (the workers compute meanwhile), serves server 0's requests for its
// range of `weights` (the model as the workers hold it) and of the state until released.
void offerCheckpoint(comm::Communicator& comm, const RangeUpdate& update, const std::string& context);
void serveCheckpoint(comm::Communicator& comm, const float* weights, RangeUpdate& update, const std::string& context);

// The dry run's lines: which server owns which parameters.
std::string describeRanges(const std::vector<KeyRange>& ranges);

// One worker's messages as the metrics count them (StepStats: each way, as sent and raw), summed
// over the servers' last Partials (`messages`: server 0's).
void countTraffic(roles::StepStats& stats, const protocol::StepMessages& messages, const std::vector<Partial>& partials);

// Each server's traffic, update time and peak memory from its last Partial, for every
// metrics line; `workers` scales its per-worker bytes.
void addServers(metrics::JsonObject& line, const std::vector<Partial>& partials, int workers);

}  // namespace pstrain::exchanges
