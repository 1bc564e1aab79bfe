#pragma once
// The lead messages between server 0 and the other servers (--servers K): small, blocking,
// one at a time. The start-up's ranges, each step's (or round's) Partial and Verdict, and
// what the metrics count of them. Server 0 decides alone what needs the whole gradient
// (skip, clip, stop) from the servers' partial sums: one scalar each for the norm, one flag
// for finiteness.
#include <cstdint>
#include <string>
#include <vector>

#include "models/Registry.h"
#include "runtime/comm/Communicator.h"
#include "runtime/comm/Values.h"
#include "runtime/Errors.h"
#include "runtime/exchanges/Ranges.h"
#include "runtime/metrics/Json.h"
#include "runtime/optim/Optimizer.h"
#include "runtime/protocol/StepMessages.h"
#include "runtime/roles/Admission.h"
#include "runtime/roles/RangeUpdate.h"

namespace pstrain::roles {
struct Server;
struct StepStats;
}

namespace pstrain::exchanges {

using roles::RangeUpdate;  // the one update, of any range (roles/RangeUpdate.h)

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

// A server's Partial of `update`'s summed gradient, with its traffic (bytes per worker, each
// way) and its update's seconds (RangeUpdate::takeUpdateSeconds: the last update's, or when
// updating on arrival this one's).
Partial partialOf(const RangeUpdate& update, double updateSeconds, double bytesOut, double bytesIn);
// The verdict's update of server `rank`'s range (none when !v.apply, or when it updated each
// part on arrival); throws naming `step` and `rank` when it leaves a weight non-finite
// (weightsNotFinite).
void applyVerdict(RangeUpdate& update, const Verdict& v, std::int64_t step, int rank);
Error weightsNotFinite(std::int64_t step, int rank);

using comm::expectBytes;  // comm/Values.h
using comm::receiveValue;
using comm::sendValue;

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
// `v` (its lr, gather and train set) told to every server, with its divisor from the
// admission rules over the whole gradient (the summed `trailer`), unless they skip the update
// (or v.apply is 0 already: skipped without asking). Sets `gradNorm` when applied.
Verdict decide(comm::Communicator& comm, roles::Admission& admission, const float* trailer,
               std::vector<Partial>& partials, std::int64_t step, Verdict v, double& gradNorm);
// Server k: its Partial to server 0, and server 0's Verdict.
Verdict receiveVerdict(comm::Communicator& comm, const Partial& partial, const std::string& context);

// The dry run's lines: which server owns which parameters.
std::string describeRanges(const std::vector<KeyRange>& ranges);

// One worker's messages as the metrics count them (StepStats: each way, as sent and raw), summed
// over the servers' last Partials (`messages`: server 0's).
void countTraffic(roles::StepStats& stats, const protocol::StepMessages& messages, const std::vector<Partial>& partials);

// Each server's traffic, update time and peak memory from its last Partial, for every
// metrics line; `workers` scales its per-worker bytes.
void addServers(metrics::JsonObject& line, const std::vector<Partial>& partials, int workers);

}  // namespace pstrain::exchanges
