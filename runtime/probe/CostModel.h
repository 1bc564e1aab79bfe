#pragma once
// pstrain's own step protocol as arithmetic (pstrain --probe): from a few measurements of a
// job's ranks (each worker's batch time, each worker's link to the server, the server's
// update, the codecs' bytes and times), the samples/s each mode would reach with 1..N of
// those workers. The model of each mode (seconds per step; b = the batch per worker; a
// message of B bytes over a link costs latency + B / bandwidth):
//   sync       slowest batch of the n + a binomial-tree reduce of the gradient and broadcast
//              of the weights (ceil(log2(n + 1)) rounds each, over the slowest link) + the
//              server's update; with a gradient codec the payloads are gathered instead
//              (n messages through the server's link, one after the other) and decoded there
//   backup     k = n - 1 of n (at least 1): the k-th fastest batch + k gradients in and k
//              weight messages out through the server's link + the update; k x b per step
//   async      each worker on its own cycle (batch + its messages both ways), as long as
//              the server's link and update keep up with all of them
//   allreduce  slowest batch + Rabenseifner's all-reduce (a reduce-scatter and an
//              all-gather: 2 (n - 1) / n of the gradient over the slowest link, 2 ceil(log2 n)
//              latencies) + the update, on every rank; with a codec an all-gather of the
//              payloads (n - 1 of them per rank)
//   diloco     a round of H local steps: H of the slowest worker's batches + the round's
//              exchange, so a step costs the slowest batch + that exchange / H. The exchange
//              (roles/rounds/RoundChain.h): the pseudo-gradient up a chain of the n workers
//              (the whole message over one link plus a chunk over each further link; every
//              worker decodes and encodes it), the outer update, the update down the chain.
//              --balance's dealing by speed and overlapped rounds are not credited.
// Codecs add their encode time on the sender and decode time on each receiver. Overlap of
// the reduction with backward is not credited (the prediction errs slow where the links
// are slow). Torch-free.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/config/Mode.h"
#include "runtime/config/TrainConfig.h"

namespace pstrain::probe {

struct CodecCost {
  double bytes = 0;          // one encoded message of the model's flat buffer
  double encodeSeconds = 0;
  double decodeSeconds = 0;
};

struct ProbeMeasurements {
  double batchSamples = 0;              // per worker per step
  std::vector<double> computeSeconds;   // by worker: one batch (data wait + forward + backward)
  std::vector<double> latencySeconds;   // by worker: one way, a small message to or from the server
  std::vector<double> bytesPerSecond;   // by worker: its link to the server
  double updateSeconds = 0;             // the server's update of the whole model
  std::map<std::string, CodecCost> gradientCodecs;  // spec -> cost ("none": raw floats)
  std::map<std::string, CodecCost> weightCodecs;    // the same for the weights
  std::int64_t localSteps = 50;                     // diloco's H (--local-steps)
};

struct Prediction {
  config::Mode mode;
  std::string gradientCodec, weightCodec;
  int workers = 0;
  double stepSeconds = 0;       // per update
  double samplesPerSecond = 0;
  double efficiency = 0;        // samplesPerSecond / (workers x the fastest worker alone)
};

// Every mode that the model predicts (all but gossip, whose ranks average when they please)
// x codec pair for 1..computeSeconds.size() workers (the first n measured ones). The peer
// modes send no weights: their weight codec reads kNoWeights. "none" must be among both codec
// maps.
std::vector<Prediction> predict(const ProbeMeasurements& m);
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
