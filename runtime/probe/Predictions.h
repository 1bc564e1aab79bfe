#pragma once
// What --probe predicts beyond the cost model's table (CostModel.h): the prediction for the
// run as configured, a mode's fastest, and what diloco's --local-steps auto and
// --overlap-rounds auto would choose on the measured links, with its time to a loss.
#include <cstdint>
#include <vector>

#include "runtime/config/TrainConfig.h"
#include "runtime/exchanges/rounds/RoundsPlan.h"
#include "runtime/probe/CostModel.h"

namespace pstrain::probe {

// diloco's H from one step to DiLoCo's 500.
extern const std::vector<std::int64_t> kLocalSteps;

// What --local-steps auto and --overlap-rounds auto would decide on the measured links for
// `workers` workers (exchanges/rounds/RoundsPlan.h, as the run decides it from its first rounds),
// with the configured codings (diloco's by default); its exchange's seconds too.
struct AutoRounds {
  exchanges::rounds::RoundsDecision decision;
  double stepSeconds = 0, exchangeSeconds = 0;
  // Its predicted time to a loss, as one worker's time over its own and as sync's over its
  // own (>1: sooner); 0 where not predicted (withTimeToLoss).
  double timesOneWorker = 0, timesSync = 0;
};
AutoRounds autoRounds(const config::TrainConfig& cfg, const ProbeMeasurements& m, int workers);

// The fastest prediction (of its codecs) of `mode` with `servers` servers and `workers`
// workers; null where none was predicted.
const Prediction* fastestOf(const std::vector<Prediction>& predictions, config::Mode mode, int servers, int workers);

// `a` with its predicted time to a loss against one worker's and sync's (RoundsPlan.h's
// model: `workers` workers in sync need 1/workers of one worker's steps, rounds of H local
// steps roundsSteps(H) times sync's), where auto decided H (a.decision.predicted).
AutoRounds withTimeToLoss(AutoRounds a, const ProbeMeasurements& m, const std::vector<Prediction>& predictions,
                          int workers);

// The prediction for the run as configured with `workers`: its mode (sync where the cost
// model has none for it) and its codecs where the probe timed them, else uncompressed; with
// its servers where the cost model predicts that many, else one.
const Prediction& asConfigured(const std::vector<Prediction>& predictions, const config::TrainConfig& cfg, int workers);

}  // namespace pstrain::probe
