#pragma once
// What a diloco run's rounds are, in one place for the server, the workers, the dry run
// and the announcement: the local steps of a round (H), whether a round's exchange travels
// during the next round, and the codecs of the two directions.
//
// --local-steps auto and --overlap-rounds auto are decided by rank 0 from the run's
// kMeasuredRound-th round (the rounds until the decision have kFirstRoundSteps local steps
// and never overlap): the slowest worker's seconds per step and the seconds the rest of the
// round took, the exchange (chooseRounds). The decision holds for the rest of the run (from
// the round after the next: the next is announced already), goes to every worker in each
// down message, to stdout and to run.json; a relaunched run measures again.
#include <cstdint>
#include <string>

#include "models/Registry.h"
#include "runtime/config/TrainConfig.h"
#include "runtime/exchanges/rounds/RoundChain.h"
#include "runtime/exchanges/Ranges.h"

namespace pstrain::exchanges::rounds {

struct RoundsPlan {
  std::int64_t localSteps = 0;  // H; 0: auto
  config::Switch overlap = config::Switch::Auto;
  RoundChain::Codecs codecs;
};

RoundsPlan roundsPlanOf(const config::TrainConfig& cfg);

// With --servers K, server k's key range of the global weights and of the outer optimizer's
// state (Ranges.h, cut inside tensors where that balances them: the chain's codecs code
// chunks, not tensors); and where each range ends (RoundChain's `serverEnds`).
std::vector<exchanges::KeyRange> roundsRanges(const models::Net& model, const config::TrainConfig& cfg);
std::vector<std::int64_t> endsOf(const std::vector<exchanges::KeyRange>& ranges);

// The bounds of an auto H and the length of the measuring first rounds. The share of a
// round that the exchange may take: kShortShare while that keeps rounds short (up to
// kShortRound steps), else kLongShare: each step of H costs some val loss, fast in a short
// run (tools/bench-lowcomm), so long rounds are worth less speed.
constexpr std::int64_t kMinAutoLocalSteps = 10, kMaxAutoLocalSteps = 500, kFirstRoundSteps = kMinAutoLocalSteps;
constexpr int kMeasuredRound = 2;
constexpr double kShortShare = 0.05, kLongShare = 0.1;
constexpr std::int64_t kShortRound = 50;

// What the rounds are from the second on: H, and whether they overlap.
struct RoundsDecision {
  std::int64_t localSteps = 0;
  bool overlap = false;
};
// `plan`'s decision given a measuring round's `stepSeconds`, the slowest worker's seconds
// per local step, and `exchangeSeconds`, what the rest of the round took. An auto H is the
// smallest in [kMinAutoLocalSteps, kMaxAutoLocalSteps] that keeps the exchange under
// kShortShare of a round if that H is at most kShortRound, else under kLongShare. Auto
// overlap is on only when no H can (the one needed is past kMaxAutoLocalSteps, or a fixed
// H's share is over kLongShare): an overlapped round costs more val loss than a longer one
// (tools/bench-lowcomm); an auto H is then the smallest whose round computes a quarter
// longer than the exchange takes.
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

}  // namespace pstrain::exchanges::rounds
