#pragma once
// pstrain's own step protocol as arithmetic (pstrain --probe): from a few measurements of a
// job's ranks (each worker's batch time, each worker's link to the server, the server's
// update, the codecs' bytes and times), the samples/s each mode would reach with 1..N of
// those workers. Each exchange's formula is in its folder (runtime/exchanges/*/, the row's
// `cost`; the terms they share: exchanges/Cost.h): seconds and samples per update of n
// workers. Overlap of the reduction with backward, --balance's dealing by speed and diloco's
// overlapped rounds are not credited (the prediction errs slow where the links are slow).
// Torch-free.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/config/Mode.h"
#include "runtime/config/TrainConfig.h"
#include "runtime/exchanges/Cost.h"

namespace pstrain::probe {

using exchanges::CodecCost;
using exchanges::ProbeMeasurements;

struct Prediction {
  config::Mode mode;
  std::string gradientCodec, weightCodec;
  int workers = 0;
  int servers = 1;              // --servers
  double stepSeconds = 0;       // per update
  double samplesPerSecond = 0;
  double efficiency = 0;        // samplesPerSecond / (workers x the fastest worker alone)
  std::string serversWords;     // with K servers: " and K servers (--servers K: ...)"; else empty
};

// Every mode that the model predicts (all but gossip, whose ranks average when they please)
// x codec pair for 1..computeSeconds.size() workers (the first n measured ones), then each
// mode whose exchange's row models K servers (Exchange::costsServers: sync's K
// servers, backup's and async's) with kServerCounts of them. The peer
// modes send no weights: their weight codec reads kNoWeights. "none" must be among both codec
// maps.
std::vector<Prediction> predict(const ProbeMeasurements& m);
constexpr int kServerCounts[] = {2, 4};
constexpr const char* kNoWeights = "-";

// Whether predict() covers `mode`.
bool predictable(config::Mode mode);

// Seconds of one diloco round's exchange with `workers` workers and those codecs (timed by
// the probe: throws std::invalid_argument otherwise); the slowest of the first `workers`
// batches.
double roundExchangeSeconds(const ProbeMeasurements& m, int workers, const std::string& gradientCodec,
                            const std::string& weightCodec);
double slowestBatchSeconds(const ProbeMeasurements& m, int workers);

// diloco for `workers` workers at each of `localSteps` (H), with its fastest codecs: the
// samples/s and the share of a step's time spent in the round's exchange.
struct LocalStepsPrediction {
  std::int64_t localSteps = 0;
  Prediction prediction;
  double commShare = 0;
};
std::vector<LocalStepsPrediction> predictLocalSteps(const ProbeMeasurements& m, int workers,
                                                    const std::vector<std::int64_t>& localSteps);

// The fastest prediction for `workers` (diloco aside: predictLocalSteps), and its line: "sync, fp16 weights + topk:0.01
// gradients: 3.1x one worker (2650 samples/s)" ("none" reads "uncompressed").
const Prediction& best(const std::vector<Prediction>& predictions, int workers);
std::string recommendation(const Prediction& p, const ProbeMeasurements& m);

}  // namespace pstrain::probe
