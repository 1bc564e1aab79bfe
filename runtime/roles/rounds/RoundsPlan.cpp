#include "runtime/roles/rounds/RoundsPlan.h"

#include <fmt/format.h>

#include "runtime/codec/Codec.h"

namespace pstrain::roles {

RoundsPlan roundsPlanOf(const config::TrainConfig& cfg) {
  RoundsPlan plan;
  plan.localSteps = cfg.localSteps;
  plan.overlap = cfg.overlapRounds;
  plan.codecs.up = cfg.compress;
  plan.codecs.down = cfg.compressWeights;
  // A lossy pseudo-gradient carries what it left out into the next round's, unless told off.
  plan.codecs.upErrorFeedback =
      cfg.errorFeedback == "auto" ? !codec::isLossless(plan.codecs.up) : cfg.errorFeedback == "on";
  return plan;
}

namespace {

// "up int4 with error feedback, down int4 updates" / "raw floats both ways".
std::string codingOf(const RoundsPlan& plan) {
  const RoundChain::Codecs& c = plan.codecs;
  if (codec::isLossless(c.up) && codec::isLossless(c.down) && c.up == config::kRawCodec && c.down == config::kRawCodec) {
    return "raw floats both ways";
  }
  return fmt::format("up {}{}, down {}", c.up, c.upErrorFeedback ? " with error feedback" : "",
                     codec::isLossless(c.down) ? c.down + " weights" : c.down + " updates (the weights whole at first)");
}

}  // namespace

std::string describeRounds(const RoundsPlan& plan, const config::TrainConfig& cfg) {
  return fmt::format("{} local steps a round{}{}; outer {}, lr {}, momentum {}; {}", plan.localSteps,
                     cfg.balance ? ", dealt by speed" : "", plan.overlap ? ", exchanged during the next" : "",
                     cfg.outerOptimizer, cfg.outerLr, cfg.outerMomentum, codingOf(plan));
}

std::string roundsDryRun(const config::TrainConfig& cfg, std::int64_t total, std::size_t down, std::size_t up) {
  const RoundsPlan plan = roundsPlanOf(cfg);
  const std::int64_t H = plan.localSteps;
  const std::int64_t rounds = (total + H - 1) / H;
  std::string out = fmt::format(
      "  rounds    {} round(s) of {} local steps{} on each worker (lr above is the inner rule, its state kept "
      "across rounds, reset on --resume); the weights down and the pseudo-gradient up once a round: {:.0f} + {:.0f} "
      "bytes per step instead of {} + {}\n",
      rounds, H, cfg.balance ? " (dealt by measured speed)" : "", static_cast<double>(down) / H,
      static_cast<double>(up) / H, down, up);
  out += fmt::format("  outer     {}, lr {}, momentum {} on the workers' mean pseudo-gradient (global - local), "
                     "weighted by their samples{}\n", cfg.outerOptimizer, cfg.outerLr, cfg.outerMomentum,
                     plan.overlap ? "; each round's exchange travels during the next round, whose progress then "
                                    "moves onto the new global weights (--overlap-rounds)" : "");
  return out;
}

}  // namespace pstrain::roles
