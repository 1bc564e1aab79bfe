#include "runtime/exchanges/rounds/Rounds.h"

#include <algorithm>
#include <cmath>

#include "runtime/config/Codecs.h"
#include "runtime/config/TrainConfig.h"
#include "runtime/exchanges/rounds/RoundsMemory.h"
#include "runtime/exchanges/rounds/RoundsPlan.h"
#include "runtime/exchanges/LeadMessages.h"
#include "runtime/exchanges/ServerRanges.h"

namespace pstrain::exchanges::rounds {
namespace {

// A message of `bytes` passed along a chain of `hops` links in chunks (RoundChain.h): the
// whole message over one link, plus one chunk over each further link; a chunk is 64 Ki
// values of a model of `values`.
double chained(double bytes, double values, int hops, const Links& l) {
  const double chunks = std::max(1.0, std::ceil(values / 65536.0));
  return message(bytes, l.worstLatency, l.slowestBandwidth) +
         (hops - 1) * message(bytes / chunks, l.worstLatency, l.slowestBandwidth);
}

// A round of H local steps: H of the slowest worker's batches and the round's exchange, so
// an update (a step) costs the slowest batch + that exchange / H. --balance's dealing by
// speed and overlapped rounds are not credited.
StepEstimate cost(const StepCost& c) {
  return {kthFastest(c.m, c.n, c.n) + roundExchangeSeconds(c.grad, c.weights, c.m, c.n) / static_cast<double>(c.m.localSteps),
          c.n * c.m.batchSamples};
}

// Checkpoints at the ends of rounds. With --local-steps auto the rounds' ends are known only
// once the first rounds are measured: the plan names the multiples of --checkpoint-every.
PlanText plan(const PlanFacts& f) {
  PlanText text;
  text.lines = rounds::roundsDryRun(f.cfg, f.total, f.down, f.up);
  if (f.cfg.servers > 1) text.lines += describeRanges(rounds::roundsRanges(f.model, f.cfg));
  text.checkpointRound = std::max<std::int64_t>(f.cfg.fixedLocalSteps(), 1);
  return text;
}

// A model whose parameters cannot give every server a range is refused (Ranges.h).
void check(const config::TrainConfig& cfg, const models::Net& model) { roundsRanges(model, cfg); }

// The figures of roundsMemory (RoundsMemory.h).
Memory memory(const config::RunPlan& cfg, const config::Layout& layout) { return roundsMemory(cfg, layout); }

// Server k > 0 updates its range of the outer step and takes it from its own model
// (receiveStart); server 0 holds the global weights whole (its chain sends them).
KeyRange serverWeights(const config::TrainConfig& cfg, const models::Net& model, int rank) {
  const auto ranges = roundsRanges(model, cfg);
  return rank == 0 ? KeyRange{0, ranges.back().end, {}} : ranges[static_cast<std::size_t>(rank)];
}

}  // namespace
}  // namespace pstrain::exchanges::rounds

namespace pstrain::exchanges {

double roundExchangeSeconds(const CodecCost& grad, const CodecCost& weights, const ProbeMeasurements& m, int n) {
  const Links l = linksOf(m, n);
  const double values = m.gradientCodecs.at(config::kRawCodec).bytes / sizeof(float);
  return n * (grad.encodeSeconds + grad.decodeSeconds) + rounds::chained(grad.bytes, values, n, l) + m.updateSeconds +
         weights.encodeSeconds + rounds::chained(weights.bytes, values, n, l) + weights.decodeSeconds;
}

const Exchange kLocalRounds = {config::Exchange::LocalRounds, nullptr, rounds::serveRounds, rounds::runRoundsOthers,
                               rounds::cost, rounds::plan, rounds::memory, rounds::check, rounds::serverWeights};

}  // namespace pstrain::exchanges
