#include "runtime/probe/CostModel.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "runtime/exchanges/rounds/Rounds.h"
#include "runtime/training/Exchanges.h"

namespace pstrain::probe {

using exchanges::kthFastest;

bool predictable(config::Mode mode) { return training::exchangeFor(mode).cost != nullptr; }

double roundExchangeSeconds(const ProbeMeasurements& m, int workers, const std::string& gradientCodec,
                            const std::string& weightCodec) {
  const auto grad = m.gradientCodecs.find(gradientCodec), weights = m.weightCodecs.find(weightCodec);
  if (grad == m.gradientCodecs.end() || weights == m.weightCodecs.end()) {
    throw std::invalid_argument(fmt::format("cost model: codecs {} and {} were not timed", gradientCodec, weightCodec));
  }
  return exchanges::roundExchangeSeconds(grad->second, weights->second, m, workers);
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
          const exchanges::StepEstimate step = training::exchangeFor(mode.mode)
                                                   .cost({mode, grad, mode.peers() ? none : weights,
                                                          gradSpec == config::kRawCodec, m, n});
          Prediction p{mode.mode, gradSpec, mode.peers() ? kNoWeights : weightSpec, n, 1, step.seconds,
                       step.samples / step.seconds, 0, {}};
          p.efficiency = p.samplesPerSecond / (n * alone);
          out.push_back(p);
        }
      }
    }
  }
  for (int n = 1; n <= workers; ++n) {
    for (const config::ModeInfo& mode : config::modes()) {
      for (int servers : kServerCounts) {
        const exchanges::Exchange& row = training::exchangeFor(mode.mode, servers);
        if (!row.cost || !row.costsServers) continue;
        for (const auto& [gradSpec, grad] : m.gradientCodecs) {
          for (const auto& [weightSpec, weights] : m.weightCodecs) {
            const exchanges::StepEstimate step =
                row.cost({mode, grad, weights, gradSpec == config::kRawCodec, m, n, servers});
            Prediction p{mode.mode, gradSpec, weightSpec, n, servers, step.seconds, step.samples / step.seconds, 0, {}};
            p.serversWords = fmt::format(" and {} servers (--servers {}: one more rank on each of {} hosts)", servers,
                                         servers, servers);
            p.efficiency = p.samplesPerSecond / (n * alone);
            out.push_back(p);
          }
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
    if (config::info(p.mode).runsLocalRounds()) continue;
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
  return fmt::format("{} with {} workers{}, {}: {:.1f}x one worker ({:.0f} samples/s)", config::nameOf(p.mode), p.workers,
                     p.serversWords, codecs, p.samplesPerSecond / alone, p.samplesPerSecond);
}

}  // namespace pstrain::probe
