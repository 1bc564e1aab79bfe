#include "runtime/probe/Predictions.h"

#include <algorithm>
#include <stdexcept>

#include "runtime/config/Layout.h"

namespace pstrain::probe {

const std::vector<std::int64_t> kLocalSteps = {1, 2, 5, 10, 20, 50, 100, 200, 500};

AutoRounds autoRounds(const config::TrainConfig& cfg, const ProbeMeasurements& m, int workers) {
  config::TrainConfig diloco = cfg;
  diloco.mode = config::Mode::Diloco;
  const exchanges::rounds::RoundsPlan plan = exchanges::rounds::roundsPlanOf(diloco);
  AutoRounds a;
  a.stepSeconds = slowestBatchSeconds(m, workers);
  try {
    a.exchangeSeconds = roundExchangeSeconds(m, workers, plan.codecs.up, plan.codecs.down);
  } catch (const std::invalid_argument&) {  // codecs the probe does not time: uncompressed
    a.exchangeSeconds = roundExchangeSeconds(m, workers, config::kRawCodec, config::kRawCodec);
  }
  a.decision = exchanges::rounds::chooseRounds(plan, a.stepSeconds, a.exchangeSeconds);
  return a;
}

const Prediction* fastestOf(const std::vector<Prediction>& predictions, config::Mode mode, int servers, int workers) {
  const Prediction* top = nullptr;
  for (const auto& p : predictions) {
    if (p.mode == mode && p.servers == servers && p.workers == workers &&
        (!top || p.samplesPerSecond > top->samplesPerSecond)) {
      top = &p;
    }
  }
  return top;
}

AutoRounds withTimeToLoss(AutoRounds a, const ProbeMeasurements& m, const std::vector<Prediction>& predictions,
                          int workers) {
  const Prediction* sync = fastestOf(predictions, config::Mode::Sync, 1, workers);
  if (a.decision.predicted <= 0 || !sync) return a;
  const double fastest = *std::min_element(m.computeSeconds.begin(), m.computeSeconds.end());
  a.timesOneWorker = workers * fastest / a.decision.predicted;
  a.timesSync = sync->stepSeconds / a.decision.predicted;
  return a;
}

const Prediction& asConfigured(const std::vector<Prediction>& predictions, const config::TrainConfig& cfg, int workers) {
  const config::Mode mode = predictable(cfg.mode) ? cfg.mode : config::Mode::Sync;
  const int given = std::max(1, config::Layout(cfg, 0).servers());  // the cost model's peers count as one server
  const bool predicted = std::any_of(predictions.begin(), predictions.end(), [&](const Prediction& p) {
    return p.mode == mode && p.servers == given;
  });
  const int servers = predicted ? given : 1;
  const Prediction* raw = nullptr;
  for (const auto& p : predictions) {
    if (p.mode != mode || p.workers != workers || p.servers != servers) continue;
    const bool peers = config::info(p.mode).peers();
    if (p.gradientCodec == cfg.gradientCodec() && (peers || p.weightCodec == cfg.weightCodec())) return p;
    if (p.gradientCodec == config::kRawCodec && (peers || p.weightCodec == config::kRawCodec)) raw = &p;
  }
  return *raw;
}

}  // namespace pstrain::probe
