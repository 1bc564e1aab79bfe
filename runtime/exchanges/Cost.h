#pragma once
// The cost model's inputs and the terms that the exchanges' formulas share (pstrain --probe;
// probe/CostModel.h puts the formulas together into predictions). A message of B bytes over
// a link costs latency + B / bandwidth; codecs add their encode time on the sender and their
// decode time on each receiver. Torch-free.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/config/Mode.h"

namespace pstrain::exchanges {

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

// One formula's question: an update of `mode` with the first n measured workers, gradients
// coded as `grad` (`raw`: not coded), weights as `weights` (peers: nothing), and `servers`
// parameter servers (--servers; each on a link like the measured server's).
struct StepCost {
  const config::ModeInfo& mode;
  const CodecCost& grad;
  const CodecCost& weights;
  bool raw;
  const ProbeMeasurements& m;
  int n;
  int servers = 1;
};

struct StepEstimate {
  double seconds = 0;  // per update
  double samples = 0;  // per update
};

// The first n workers' links.
struct Links {
  double worstLatency = 0, slowestBandwidth = 0, serverBandwidth = 0;
};
Links linksOf(const ProbeMeasurements& m, int n);

double message(double bytes, double latency, double bandwidth);

// The k-th smallest of the first n batch times (k from 1).
double kthFastest(const ProbeMeasurements& m, int n, int k);

}  // namespace pstrain::exchanges
