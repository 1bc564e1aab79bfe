#include "runtime/probe/CostModel.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace pstrain::probe {
namespace {

struct Links {  // the first n workers' links
  double worstLatency = 0, slowestBandwidth = 0, serverBandwidth = 0;
};

Links linksOf(const ProbeMeasurements& m, int n) {
  Links l;
  l.slowestBandwidth = m.bytesPerSecond[0];
  for (int i = 0; i < n; ++i) {
    l.worstLatency = std::max(l.worstLatency, m.latencySeconds[i]);
    l.slowestBandwidth = std::min(l.slowestBandwidth, m.bytesPerSecond[i]);
    l.serverBandwidth = std::max(l.serverBandwidth, m.bytesPerSecond[i]);  // the server's own link
  }
  return l;
}

double message(double bytes, double latency, double bandwidth) { return latency + bytes / bandwidth; }

// The k-th smallest of the first n batch times (k from 1).
double kthFastest(const ProbeMeasurements& m, int n, int k) {
  std::vector<double> times(m.computeSeconds.begin(), m.computeSeconds.begin() + n);
  std::nth_element(times.begin(), times.begin() + (k - 1), times.end());
  return times[static_cast<std::size_t>(k - 1)];
}

// A message of `bytes` passed along a chain of `hops` links in chunks (diloco's rounds,
// roles/rounds/RoundChain.h): the whole message over one link, plus one chunk over each
// further link; a chunk is 64 Ki values of a model of `values`.
double chained(double bytes, double values, int hops, const Links& l) {
  const double chunks = std::max(1.0, std::ceil(values / 65536.0));
  return message(bytes, l.worstLatency, l.slowestBandwidth) +
         (hops - 1) * message(bytes / chunks, l.worstLatency, l.slowestBandwidth);
}

// One round's exchange of diloco with n workers: the pseudo-gradients summed up the chain
// (each hop decodes, adds and encodes again), the outer update, the update (or the weights)
// down the chain.
double roundExchange(const CodecCost& grad, const CodecCost& weights, const ProbeMeasurements& m, int n) {
  const Links l = linksOf(m, n);
  const double values = m.gradientCodecs.at(config::kRawCodec).bytes / sizeof(float);
  return n * (grad.encodeSeconds + grad.decodeSeconds) + chained(grad.bytes, values, n, l) + m.updateSeconds +
         weights.encodeSeconds + chained(weights.bytes, values, n, l) + weights.decodeSeconds;
}

double stepSeconds(const config::ModeInfo& mode, const CodecCost& grad, const CodecCost& weights, bool raw,
                   const ProbeMeasurements& m, int n, double& samplesPerStep) {
  using config::Exchange;
  using config::Quorum;
  const Links l = linksOf(m, n);
  samplesPerStep = n * m.batchSamples;
  const double slowest = kthFastest(m, n, n);
  if (mode.exchange == Exchange::LocalRounds) {
    return slowest + roundExchange(grad, weights, m, n) / static_cast<double>(m.localSteps);
  }
  if (mode.exchange == Exchange::Collective) {
    const double rounds = std::ceil(std::log2(n + 1.0));
    const double down = weights.encodeSeconds + rounds * message(weights.bytes, l.worstLatency, l.slowestBandwidth) +
                        weights.decodeSeconds;
    const double up = raw ? rounds * message(grad.bytes, l.worstLatency, l.slowestBandwidth)
                          : grad.encodeSeconds + n * message(grad.bytes, l.worstLatency, l.serverBandwidth) +
                                n * grad.decodeSeconds;
    return slowest + up + m.updateSeconds + down;
  }
  if (mode.exchange == Exchange::PointToPoint && mode.quorum == Quorum::Aggregate) {
    const int k = std::max(1, n - 1);
    samplesPerStep = k * m.batchSamples;
    return kthFastest(m, n, k) + grad.encodeSeconds + k * message(grad.bytes, l.worstLatency, l.serverBandwidth) +
           k * grad.decodeSeconds + m.updateSeconds + weights.encodeSeconds +
           k * message(weights.bytes, l.worstLatency, l.serverBandwidth) + weights.decodeSeconds;
  }
  if (mode.exchange == Exchange::PointToPoint && mode.quorum == Quorum::One) {
    // Samples per second: each worker's own cycle, unless the server is the bottleneck.
    double rate = 0;
    for (int i = 0; i < n; ++i) {
      const double cycle = m.computeSeconds[i] + grad.encodeSeconds + message(grad.bytes, m.latencySeconds[i], m.bytesPerSecond[i]) +
                           grad.decodeSeconds + m.updateSeconds + weights.encodeSeconds +
                           message(weights.bytes, m.latencySeconds[i], m.bytesPerSecond[i]) + weights.decodeSeconds;
      rate += m.batchSamples / cycle;
    }
    const double serverPerGradient = (grad.bytes + weights.bytes) / l.serverBandwidth + grad.decodeSeconds +
                                     m.updateSeconds + weights.encodeSeconds;
    rate = std::min(rate, m.batchSamples / serverPerGradient);
    samplesPerStep = m.batchSamples;  // one gradient per update
    return m.batchSamples / rate;
  }
  if (mode.exchange == Exchange::AllReduce) {
    const double exchange = n == 1 ? 0
                            : raw  ? 2.0 * std::ceil(std::log2(n)) * l.worstLatency + 2.0 * (n - 1) / n * grad.bytes / l.slowestBandwidth
                                   : grad.encodeSeconds + (n - 1) * (message(grad.bytes, l.worstLatency, l.slowestBandwidth) +
                                                                     grad.decodeSeconds);
    return slowest + exchange + m.updateSeconds;
  }
  throw std::invalid_argument(std::string("cost model: no formula for mode ") + mode.name);
}

}  // namespace

bool predictable(config::Mode mode) { return config::info(mode).exchange != config::Exchange::Gossip; }

double roundExchangeSeconds(const ProbeMeasurements& m, int workers, const std::string& gradientCodec,
                            const std::string& weightCodec) {
  const auto grad = m.gradientCodecs.find(gradientCodec), weights = m.weightCodecs.find(weightCodec);
  if (grad == m.gradientCodecs.end() || weights == m.weightCodecs.end()) {
    throw std::invalid_argument(fmt::format("cost model: codecs {} and {} were not timed", gradientCodec, weightCodec));
  }
  return roundExchange(grad->second, weights->second, m, workers);
}

double slowestBatchSeconds(const ProbeMeasurements& m, int workers) { return kthFastest(m, workers, workers); }

std::vector<LocalStepsPrediction> predictLocalSteps(const ProbeMeasurements& m, int workers,
                                                    const std::vector<std::int64_t>& localSteps) {
  std::vector<LocalStepsPrediction> out;
  ProbeMeasurements at = m;
  for (std::int64_t h : localSteps) {
    at.localSteps = h;
    const Prediction* top = nullptr;
    const auto all = predict(at);
    for (const auto& p : all) {
      if (p.mode == config::Mode::Diloco && p.workers == workers && (!top || p.samplesPerSecond > top->samplesPerSecond)) {
        top = &p;
      }
    }
    if (!top) throw std::invalid_argument(fmt::format("cost model: no diloco prediction for {} workers", workers));
    const double compute = kthFastest(m, workers, workers);
    out.push_back({h, *top, std::max(0.0, 1 - compute / top->stepSeconds)});
  }
  return out;
}

std::vector<Prediction> predict(const ProbeMeasurements& m) {
  const int workers = static_cast<int>(m.computeSeconds.size());
  if (workers == 0 || m.latencySeconds.size() != m.computeSeconds.size() ||
      m.bytesPerSecond.size() != m.computeSeconds.size() || !m.gradientCodecs.count(config::kRawCodec) ||
      !m.weightCodecs.count(config::kRawCodec)) {
    throw std::invalid_argument("cost model: incomplete measurements");
  }
  const double fastest = *std::min_element(m.computeSeconds.begin(), m.computeSeconds.end());
  const double alone = m.batchSamples / fastest;
  std::vector<Prediction> out;
  for (int n = 1; n <= workers; ++n) {
    for (const config::ModeInfo& mode : config::modes()) {
      if (!predictable(mode.mode)) continue;
      for (const auto& [gradSpec, grad] : m.gradientCodecs) {
        for (const auto& [weightSpec, weights] : m.weightCodecs) {
          if (mode.peers() && weightSpec != config::kRawCodec) continue;
          const CodecCost none;  // peers send no weights
          double samples = 0;
          const double step = stepSeconds(mode, grad, mode.peers() ? none : weights, gradSpec == config::kRawCodec, m, n, samples);
          Prediction p{mode.mode, gradSpec, mode.peers() ? kNoWeights : weightSpec, n, step, samples / step, 0};
          p.efficiency = p.samplesPerSecond / (n * alone);
          out.push_back(p);
        }
      }
    }
  }
  return out;
}

const Prediction& best(const std::vector<Prediction>& predictions, int workers) {
  const Prediction* top = nullptr;
  for (const auto& p : predictions) {
    // diloco trades some quality per sample for speed: it has a line of its own
    // (predictLocalSteps), never the recommendation among the modes that train alike.
    if (config::info(p.mode).outerOptimizer()) continue;
    if (p.workers == workers && (!top || p.samplesPerSecond > top->samplesPerSecond)) top = &p;
  }
  if (!top) throw std::invalid_argument(fmt::format("cost model: no prediction for {} workers", workers));
  return *top;
}

std::string recommendation(const Prediction& p, const ProbeMeasurements& m) {
  const double fastest = *std::min_element(m.computeSeconds.begin(), m.computeSeconds.end());
  const double alone = m.batchSamples / fastest;
  auto named = [](const std::string& spec) { return spec == config::kRawCodec ? std::string("uncompressed") : spec; };
  std::string codecs = config::info(p.mode).peers()
                           ? named(p.gradientCodec) + " gradients"
                           : named(p.weightCodec) + " weights + " + named(p.gradientCodec) + " gradients";
  return fmt::format("{} with {} workers, {}: {:.1f}x one worker ({:.0f} samples/s)", config::nameOf(p.mode), p.workers, codecs,
                     p.samplesPerSecond / alone, p.samplesPerSecond);
}

}  // namespace pstrain::probe
