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
  const int fragments = cfg.fixedFragments();
  const bool mayStream = cfg.servers == 1 && plan.overlap != config::Switch::Off;  // auto's
  plan.fragments = fragments > 0 ? fragments : mayStream ? kAutoFragments : 1;
  plan.codecs.up = cfg.gradientCodec();
  plan.codecs.down = cfg.weightCodec();
  // A lossy pseudo-gradient carries what it left out into the next round's, unless told off.
  plan.codecs.upErrorFeedback =
      cfg.errorFeedback == config::Switch::Auto ? !config::isLossless(plan.codecs.up) : cfg.errorFeedback == config::Switch::On;
  return plan;
}

Memory roundsMemory(const config::RunPlan& cfg, const config::Layout& layout) {
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

std::vector<exchanges::KeyRange> fragmentRanges(const models::Net& model, int fragments) {
  return exchanges::keyRanges(protocol::parameterShapes(model), fragments);
}

std::vector<Lane> roundLanes(comm::Communicator& comm, const models::Net& model, const config::TrainConfig& cfg,
                             std::int64_t upFixed, std::int64_t downFixed, const RoundChain::Codecs& codecs,
                             std::uint64_t seed) {
  std::vector<Lane> lanes;
  const std::vector<std::int64_t> ends = endsOf(roundsRanges(model, cfg));
  lanes.push_back({0, ends.back(), std::make_unique<RoundChain>(comm, ends, upFixed, downFixed, codecs, seed)});
  const int fragments = roundsPlanOf(cfg).fragments;
  if (fragments <= 1) return lanes;
  std::uint64_t fragmentSeed = seed;
  for (const exchanges::KeyRange& f : fragmentRanges(model, fragments)) {
    fragmentSeed = fragmentSeed * 6364136223846793005u + 1442695040888963407u;  // each fragment's codes its own
    lanes.push_back({f.begin, f.size(), std::make_unique<RoundChain>(comm, std::vector<std::int64_t>{f.size()}, upFixed,
                                                                      downFixed, codecs, fragmentSeed)});
  }
  return lanes;
}

std::size_t LaneSchedule::next(const RoundsDecision& d, bool endsRun) {
  if (d.fragments <= 1 || endsRun) return 0;
  if (d.fragments != fragments_) {
    throw CommError(fmt::format("the server streams {} fragments, this rank's --fragments is {}", d.fragments, fragments_));
  }
  return 1 + static_cast<std::size_t>(streamed_++ % fragments_);
}

std::vector<std::int64_t> endsOf(const std::vector<exchanges::KeyRange>& ranges) {
  std::vector<std::int64_t> ends;
  for (const exchanges::KeyRange& r : ranges) ends.push_back(r.end);
  return ends;
}

double roundsSteps(std::int64_t localSteps, bool overlap) {
  const double h = static_cast<double>(std::max<std::int64_t>(localSteps, 1));
  return (1 + kCostPerDoubling * std::max(0.0, std::log2(h / kFreeLocalSteps))) * (overlap ? 1 + kOverlapCost : 1);
}

double roundsStepSeconds(std::int64_t localSteps, bool overlap, double stepSeconds, double exchangeSeconds) {
  const double h = static_cast<double>(std::max<std::int64_t>(localSteps, 1));
  if (overlap) return std::max(stepSeconds, kHideFactor * exchangeSeconds / h);
  return stepSeconds + exchangeSeconds / h;
}

RoundsDecision chooseRounds(const RoundsPlan& plan, double stepSeconds, double exchangeSeconds) {
  const double step = std::max(stepSeconds, 1e-6), exchange = std::max(exchangeSeconds, 0.0);
  auto cost = [&](std::int64_t H, bool overlap) {
    return roundsSteps(H, overlap) * roundsStepSeconds(H, overlap, step, exchange);
  };
  // The best H of one way: a fixed one, the smallest that hides an overlapped exchange, or
  // the best of the range without overlap.
  auto best = [&](bool overlap) {
    if (plan.localSteps > 0) return plan.localSteps;
    if (overlap) {
      return std::clamp<std::int64_t>(static_cast<std::int64_t>(std::ceil(kHideFactor * exchange / step)),
                                      kMinOverlappedLocalSteps, kMaxAutoLocalSteps);
    }
    std::int64_t chosen = kMinAutoLocalSteps;
    for (std::int64_t H = kMinAutoLocalSteps; H <= kMaxAutoLocalSteps; ++H) {
      if (cost(H, false) < cost(chosen, false)) chosen = H;
    }
    return chosen;
  };
  // Streamed, a round is H / P steps: its exchange, a P-th of the model's, hides as the
  // whole one does in H steps, and each fragment's rounds span H, as the model's would.
  auto streamed = [&](RoundsDecision d) {
    if (!d.overlap || plan.fragments <= 1) return d;
    d.fragments = plan.fragments;
    d.localSteps = (d.localSteps + plan.fragments - 1) / plan.fragments;
    return d;
  };
  RoundsDecision d;
  if (plan.overlap != config::Switch::Auto) {
    d.overlap = plan.overlap == config::Switch::On;
    d.localSteps = best(d.overlap);
    if (plan.localSteps == 0) d.predicted = cost(d.localSteps, d.overlap);
    return streamed(d);
  }
  const std::int64_t overlapped = best(true), apart = best(false);
  d.overlap = cost(overlapped, true) < cost(apart, false);
  d.localSteps = d.overlap ? overlapped : apart;
  d.otherLocalSteps = d.overlap ? apart : overlapped;
  d.predicted = cost(d.localSteps, d.overlap);
  d.otherPredicted = cost(d.otherLocalSteps, !d.overlap);
  return streamed(d);
}

std::int64_t raisedLocalSteps(std::int64_t localSteps, double periodSeconds, double computeSeconds) {
  if (localSteps >= kMaxAutoLocalSteps || !(computeSeconds > 0) || !(periodSeconds > (1 + kUnhiddenShare) * computeSeconds)) {
    return localSteps;
  }
  const double wanted = std::ceil(kRaiseMargin * static_cast<double>(localSteps) * periodSeconds / computeSeconds);
  return std::clamp<std::int64_t>(static_cast<std::int64_t>(std::min(wanted, 1e9)), localSteps + 1, kMaxAutoLocalSteps);
}

std::string whyRounds(const RoundsDecision& d) {
  const std::string streamed =
      d.fragments > 1 ? fmt::format(", each exchanging one of {} fragments (each fragment every {} steps)",
                                    d.fragments, d.localSteps * d.fragments)
                      : "";
  if (d.predicted == 0) return "as the flags fix them" + streamed;
  const std::string kind = d.overlap ? "overlapped" : "not overlapped";
  if (d.otherPredicted == 0) {
    return fmt::format("{} rounds of {} local steps{}: {:.4f} s a step of sync's quality", kind, d.localSteps, streamed,
                       d.predicted);
  }
  return fmt::format("{} rounds of {} local steps{}: {:.4f} s a step of sync's quality, against {:.4f} {} at {}", kind,
                     d.localSteps, streamed, d.predicted, d.otherPredicted, d.overlap ? "not overlapped" : "overlapped",
                     d.otherLocalSteps);
}

void writeDecision(const RoundsDecision& decision, float* out) {
  out[0] = static_cast<float>(decision.localSteps);
  out[1] = decision.overlap ? 1.0f : 0.0f;
  out[2] = static_cast<float>(decision.fragments);
}

RoundsDecision readDecision(const float* in) {
  if (!(in[0] >= 1 && in[0] <= 1e6 && in[0] == std::floor(in[0])) || !(in[1] == 0 || in[1] == 1) ||
      !(in[2] >= 1 && in[2] <= 64 && in[2] == std::floor(in[2])) || (in[2] > 1 && in[1] == 0)) {
    throw CommError(fmt::format("a garbled round plan from the server ({} local steps, overlap {}, {} fragments)", in[0],
                                in[1], in[2]));
  }
  RoundsDecision d;
  d.localSteps = static_cast<std::int64_t>(in[0]);
  d.overlap = in[1] == 1;
  d.fragments = static_cast<int>(in[2]);
  return d;
}

namespace {

// "up int4 with error feedback, down int4 updates" / "raw floats both ways".
std::string codingOf(const RoundsPlan& plan) {
  const RoundChain::Codecs& c = plan.codecs;
  if (c.up == config::kRawCodec && c.down == config::kRawCodec) return "raw floats both ways";
  return fmt::format("up {}{}, down {}", c.up, c.upErrorFeedback ? " with error feedback" : "",
                     config::isLossless(c.down)
                         ? c.down + " weights"
                         : c.down + " updates (at first the weights whole, or none where every worker holds them)");
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

// ", overlapped rounds streamed in 2 fragments": --fragments.
std::string fragmentsOf(const RoundsPlan& plan) {
  return plan.fragments > 1 ? fmt::format(", overlapped rounds streamed in {} fragments", plan.fragments) : "";
}

}  // namespace

std::string describeRounds(const RoundsPlan& plan, const config::TrainConfig& cfg) {
  return fmt::format("{}{}{}{}; {}; {}", localStepsOf(plan), cfg.balance() ? ", dealt by speed" : "",
                     overlapOf(plan.overlap), fragmentsOf(plan), outerOf(cfg), codingOf(plan));
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
        "exchange (rounds 2 to {}); the rest have the H in [{}, {}] of the shortest predicted time to a loss (a round "
        "of H steps needs 1 + {} x log2(H / {}) times sync's steps; an overlapped one hides its exchange when its H steps "
        "last {} exchanges, from {} steps) (lr above is the inner rule, its state kept across rounds, reset on --resume); the "
        "weights down and the pseudo-gradient up once a round ({} + {} bytes raw)\n",
        kFirstRoundSteps, cfg.balance() ? " (dealt by measured speed)" : "", kMeasuredRounds, kMinAutoLocalSteps,
        kMaxAutoLocalSteps, kCostPerDoubling, kFreeLocalSteps, kHideFactor, kMinOverlappedLocalSteps, down, up);
  }
  out += fmt::format("  coding    {}\n", codingOf(plan));
  std::string overlap;
  if (plan.overlap == config::Switch::On) {
    overlap = "; each round's exchange travels during the next round, whose progress then moves onto the new global "
              "weights as soon as they are in (--overlap-rounds)";
  } else if (plan.overlap == config::Switch::Auto) {
    overlap = "; rounds overlap their exchange (--overlap-rounds) where the measuring rounds predict that to reach a "
              "loss sooner";
  }
  if (plan.fragments > 1) {
    overlap += fmt::format("; streamed: the weights cut into {} fragments, an overlapped round exchanges one of them in "
                           "turn and lasts H / {} local steps (--fragments)", plan.fragments, plan.fragments);
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
