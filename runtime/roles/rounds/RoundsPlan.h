#pragma once
// What a diloco run's rounds are, in one place for the server, the workers, the dry run
// and the announcement: the local steps of a round (H), whether a round's exchange travels
// during the next round, and the codecs of the two directions.
//
// --local-steps auto and --overlap-rounds auto are decided by rank 0 from the run's first
// round (kFirstRoundSteps local steps, never overlapped): the slowest worker's seconds per
// step and the seconds the exchange took besides (chooseRounds). The decision holds for the
// rest of the run, goes to every worker in each down message, to stdout and to run.json; a
// relaunched run measures again.
#include <cstdint>
#include <string>

#include "runtime/config/TrainConfig.h"
#include "runtime/roles/rounds/RoundChain.h"

namespace pstrain::roles {

enum class Setting { Off, On, Auto };

struct RoundsPlan {
  std::int64_t localSteps = 0;  // H; 0: auto
  Setting overlap = Setting::Auto;
  RoundChain::Codecs codecs;
};

RoundsPlan roundsPlanOf(const config::TrainConfig& cfg);

// The bounds of an auto H, the length of the measuring first round, and the share of a
// round that an exchange may take before it is worth hiding.
constexpr std::int64_t kMinAutoLocalSteps = 10, kMaxAutoLocalSteps = 500, kFirstRoundSteps = kMinAutoLocalSteps;
constexpr double kCommShareTarget = 0.1;

// What the rounds are from the second on: H, and whether they overlap.
struct RoundsDecision {
  std::int64_t localSteps = 0;
  bool overlap = false;
};
// `plan`'s decision given the first round's measures: `stepSeconds`, the slowest worker's
// seconds per local step, and `exchangeSeconds`, what the rest of the round took. An auto H
// is the smallest in [kMinAutoLocalSteps, kMaxAutoLocalSteps] that keeps the exchange under
// kCommShareTarget of a round; auto overlap is on when that share cannot be kept (the H
// needed is past the bound, or a fixed H's share is over it), and then an auto H is the
// smallest whose round computes for a quarter longer than the exchange takes (hidden).
RoundsDecision chooseRounds(const RoundsPlan& plan, double stepSeconds, double exchangeSeconds);

// A down message begins with the decision the workers follow from their next round on, as
// kDecisionFloats floats; readDecision throws CommError on values no server sends.
constexpr std::size_t kDecisionFloats = 2;
void writeDecision(const RoundsDecision& decision, float* out);
RoundsDecision readDecision(const float* in);

// "50 local steps a round, dealt by speed, exchanged during the next; outer nesterov, lr
// 0.7, momentum 0.6; up int4 with error feedback, down int4 updates": the server's
// announcement.
std::string describeRounds(const RoundsPlan& plan, const config::TrainConfig& cfg);

// The dry run's lines of the rounds: how many, what each direction sends, the outer step.
// `down`, `up`: the raw bytes of one down and one up message.
std::string roundsDryRun(const config::TrainConfig& cfg, std::int64_t total, std::size_t down, std::size_t up);

}  // namespace pstrain::roles
