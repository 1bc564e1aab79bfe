#include "runtime/exchanges/rounds/RoundsPlan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "runtime/Errors.h"
#include "runtime/codec/Codec.h"
#include "runtime/config/Codecs.h"
#include "runtime/exchanges/rounds/RoundsMemory.h"
#include "runtime/protocol/FlatParameters.h"

namespace pstrain::exchanges::rounds {


RoundsPlan roundsPlanOf(const config::TrainConfig& cfg) {
  RoundsPlan plan;
  plan.localSteps = cfg.fixedLocalSteps();
  plan.overlap = cfg.overlapRoundsFlag;
  plan.codecs.up = cfg.gradientCodec();
  plan.codecs.down = cfg.weightCodec();
  // A lossy pseudo-gradient carries what it left out into the next round's, unless told off.
  plan.codecs.upErrorFeedback =
      cfg.errorFeedback == config::Switch::Auto ? !config::isLossless(plan.codecs.up) : cfg.errorFeedback == config::Switch::On;
  return plan;
}

Memory roundsMemory(const config::TrainConfig& cfg, const config::Layout& layout) {
  const double innerState = stateBytes(cfg), outerState = stateBytes(cfg.updateRule());
  const RoundsPlan plan = roundsPlanOf(cfg);
  // A codec's largest frame per float (RoundChain sizes its messages so), over a chunk.
  auto frame = [](const std::string& spec) {
    constexpr std::int64_t n = std::int64_t(1) << 20;
    return static_cast<double>(codec::makeCodec(spec, {{n}}, 0, "compress")->maxFrameBytes()) / static_cast<double>(n);
  };
  const bool lossyDown = !config::isLossless(plan.codecs.down);
  const double up = frame(plan.codecs.up), down = frame(plan.codecs.down);  // down: whole, or the updates
  Memory m;
  const double overlapped = 8;
  const double residual = plan.codecs.upErrorFeedback ? codec::residualBytes(plan.codecs.up) : 0;
  m.held = weightBytes(cfg);
  const double copy = lossyDown ? 2 : 4;  // the global weights: bfloat16 under a lossy down codec (RoundChain.h)
  // Not the chain's frames: they are freed between exchanges (RoundChain::advance), and an
  // exchange holds them while the worker does not compute, below its peak in a step.
  m.worker = innerState + copy + residual + (plan.overlap == config::Switch::On ? overlapped : 0);
  m.ifOverlapped = plan.overlap == config::Switch::Auto ? overlapped : 0;
  m.server = outerState + 4 + (lossyDown ? 4 : 0) + up + down;
  m.leadHoldsAll = layout.cutsWeights();
  m.leadCopy = m.leadHoldsAll && lossyDown ? 4 : 0;
  return m;
}

std::vector<exchanges::KeyRange> roundsRanges(const models::Net& model, const config::TrainConfig& cfg) {
  return exchanges::keyRanges(protocol::parameterShapes(model), cfg.servers);
}

std::vector<std::int64_t> endsOf(const std::vector<exchanges::KeyRange>& ranges) {
  std::vector<std::int64_t> ends;
  for (const exchanges::KeyRange& r : ranges) ends.push_back(r.end);
  return ends;
}

RoundsDecision chooseRounds(const RoundsPlan& plan, double stepSeconds, double exchangeSeconds) {
  const double step = std::max(stepSeconds, 1e-6), exchange = std::max(exchangeSeconds, 0.0);
  auto bounded = [](double h) {
    return std::clamp<std::int64_t>(static_cast<std::int64_t>(std::ceil(h)), kMinAutoLocalSteps, kMaxAutoLocalSteps);
  };
  // The H whose exchange is `share` of its round: exchange / (H step + exchange).
  auto under = [&](double share) { return exchange * (1 - share) / (share * step); };
  const double needed = under(kShortShare) <= kShortRound ? under(kShortShare) : under(kLongShare);
  RoundsDecision d;
  if (plan.overlap == config::Switch::Auto) {
    d.overlap = plan.localSteps > 0 ? exchange > kLongShare * (plan.localSteps * step + exchange)
                                    : needed > kMaxAutoLocalSteps;
  } else {
    d.overlap = plan.overlap == config::Switch::On;
  }
  d.localSteps = plan.localSteps > 0 ? plan.localSteps : d.overlap ? bounded(1.25 * exchange / step) : bounded(needed);
  return d;
}

void writeDecision(const RoundsDecision& decision, float* out) {
  out[0] = static_cast<float>(decision.localSteps);
  out[1] = decision.overlap ? 1.0f : 0.0f;
}

RoundsDecision readDecision(const float* in) {
  if (!(in[0] >= 1 && in[0] <= 1e6 && in[0] == std::floor(in[0])) || !(in[1] == 0 || in[1] == 1)) {
    throw CommError(fmt::format("a garbled round plan from the server ({} local steps, overlap {})", in[0], in[1]));
  }
  return {static_cast<std::int64_t>(in[0]), in[1] == 1};
}

namespace {

// "up int4 with error feedback, down int4 updates" / "raw floats both ways".
std::string codingOf(const RoundsPlan& plan) {
  const RoundChain::Codecs& c = plan.codecs;
  if (c.up == config::kRawCodec && c.down == config::kRawCodec) return "raw floats both ways";
  return fmt::format("up {}{}, down {}", c.up, c.upErrorFeedback ? " with error feedback" : "",
                     config::isLossless(c.down) ? c.down + " weights" : c.down + " updates (the weights whole at first)");
}

std::string localStepsOf(const RoundsPlan& plan) {
  return plan.localSteps > 0 ? fmt::format("{} local steps a round", plan.localSteps)
                             : fmt::format("local steps auto (measured in rounds of {} first)", kFirstRoundSteps);
}

const char* overlapOf(config::Switch overlap) {
  return overlap == config::Switch::On ? ", exchanged during the next" : overlap == config::Switch::Auto ? ", overlap auto" : "";
}

// "outer nesterov, lr 0.7, momentum 0.6", or localsgd's plain average.
std::string outerOf(const config::TrainConfig& cfg) {
  if (cfg.modeInfo().averages) return "no outer optimizer: the workers' mean";
  return fmt::format("outer {}, lr {}, momentum {}", cfg.outerOptimizer, cfg.outerLr, cfg.outerMomentum);
}

}  // namespace

std::string describeRounds(const RoundsPlan& plan, const config::TrainConfig& cfg) {
  return fmt::format("{}{}{}; {}; {}", localStepsOf(plan), cfg.balance() ? ", dealt by speed" : "",
                     overlapOf(plan.overlap), outerOf(cfg), codingOf(plan));
}

std::string roundsDryRun(const config::TrainConfig& cfg, std::int64_t total, std::size_t down, std::size_t up) {
  const RoundsPlan plan = roundsPlanOf(cfg);
  std::string out;
  if (plan.localSteps > 0) {
    const std::int64_t H = plan.localSteps;
    out += fmt::format(
        "  rounds    {} round(s) of {} local steps{} on each worker (lr above is the inner rule, its state kept "
        "across rounds, reset on --resume); the weights down and the pseudo-gradient up once a round: {:.0f} + {:.0f} "
        "bytes per step instead of {} + {}\n",
        (total + H - 1) / H, H, cfg.balance() ? " (dealt by measured speed)" : "", static_cast<double>(down) / H,
        static_cast<double>(up) / H, down, up);
  } else {
    out += fmt::format(
        "  rounds    local steps auto: the first rounds, of {} local steps{} on each worker, measure a step and the "
        "exchange (round {}); the rest have the fewest in [{}, {}] that keep the exchange under {:.0f}% of a round "
        "(under {:.0f}% where that takes more than {}) (lr above is the inner rule, its state kept across rounds, reset "
        "on --resume); the weights down and the pseudo-gradient up once a round ({} + {} bytes raw)\n",
        kFirstRoundSteps, cfg.balance() ? " (dealt by measured speed)" : "", kMeasuredRound, kMinAutoLocalSteps,
        kMaxAutoLocalSteps, 100 * kShortShare, 100 * kLongShare, kShortRound, down, up);
  }
  out += fmt::format("  coding    {}\n", codingOf(plan));
  std::string overlap;
  if (plan.overlap == config::Switch::On) {
    overlap = "; each round's exchange travels during the next round, whose progress then moves onto the new global "
              "weights as soon as they are in (--overlap-rounds)";
  } else if (plan.overlap == config::Switch::Auto) {
    overlap = fmt::format("; rounds overlap their exchange (--overlap-rounds) if the first rounds show that it {}",
                          plan.localSteps > 0 ? fmt::format("takes over {:.0f}% of a round", 100 * kLongShare)
                                              : fmt::format("would take over {:.0f}% of a round even at {} local steps",
                                                            100 * kLongShare, kMaxAutoLocalSteps));
  }
  if (cfg.modeInfo().averages) {
    out += fmt::format("  outer     none: the global weights become the mean of the workers' weights, weighted by their "
                       "samples{}\n", overlap);
  } else {
    out += fmt::format("  outer     {}, lr {}, momentum {} on the workers' mean pseudo-gradient (global - local), "
                       "weighted by their samples{}\n", cfg.outerOptimizer, cfg.outerLr, cfg.outerMomentum, overlap);
  }
  return out;
}

}  // namespace pstrain::exchanges::rounds
