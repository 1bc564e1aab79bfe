#pragma once
// What a diloco run's rounds are, in one place for the server, the workers, the dry run
// and the announcement: the local steps of a round (H), whether a round's exchange travels
// during the next round, and the codecs of the two directions.
//
// --local-steps auto and --overlap-rounds auto are decided by rank 0 from the run's measuring
// rounds (kMeasuredRounds: until the decision, rounds have kFirstRoundSteps local steps and
// never overlap): the slowest worker's seconds per step and the exchange's, from the start of
// a round's down message to the end of its up message less the compute (the larger of the
// measuring rounds': a shaped link's first burst makes one round's exchange look quicker than
// the link sustains). chooseRounds picks the H and overlap of the shortest predicted time to
// a loss, before the last measuring round's down message goes: the decision holds from the
// round it announces, goes to every worker in each down message, to stdout and to run.json;
// a relaunched run measures again. Two rounds measure, not one: at 2 Mbit/s one round's
// exchange looked 0.67 s where the link sustained 1.2 s, and the H grown from it once
// running (raisedLocalSteps) overshot (59 to 67 steps, against 50 to 56 from two), reaching
// one worker's loss no sooner (issue 83).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/Registry.h"
#include "runtime/config/TrainConfig.h"
#include "runtime/exchanges/rounds/RoundChain.h"
#include "runtime/exchanges/Ranges.h"

namespace pstrain::exchanges::rounds {

struct RoundsPlan {
  std::int64_t localSteps = 0;  // H; 0: auto
  config::Switch overlap = config::Switch::Auto;
  int fragments = 1;  // --fragments, auto resolved: streamed rounds (RoundsDecision)
  RoundChain::Codecs codecs;
};

RoundsPlan roundsPlanOf(const config::TrainConfig& cfg);

// With --servers K, server k's key range of the global weights and of the outer optimizer's
// state (Ranges.h, cut inside tensors where that balances them: the chain's codecs code
// chunks, not tensors); and where each range ends (RoundChain's `serverEnds`).
std::vector<exchanges::KeyRange> roundsRanges(const models::Net& model, const config::TrainConfig& cfg);
std::vector<std::int64_t> endsOf(const std::vector<exchanges::KeyRange>& ranges);

// The bounds of an auto H, the length of the measuring first rounds, and how many measure.
constexpr std::int64_t kMinAutoLocalSteps = 10, kMaxAutoLocalSteps = 500, kFirstRoundSteps = kMinAutoLocalSteps;
// Rounds 2 and 3 measure: the first's workers start one after another, as the first down
// message reaches each along the chain.
constexpr int kMeasuredRounds = 3;

// The time-to-loss model auto decides by, measured with tools/bench-lowcomm's time-to-loss
// rows (the byte-level LM, 2 workers, AdamW; docs/benchmarks.md):
// - a round of H local steps needs roundsSteps(H) times the steps of sync to reach a loss:
//   1 up to kFreeLocalSteps, then kCostPerDoubling more for each doubling of H (measured: H
//   29 about 1.0, H 100 about 1.4, H 441 about 2.0);
// - an overlapped round trains from weights a round older: kOverlapCost more (measured: none
//   at H 20 and 100; kept above 0 so that overlap is chosen where it saves time);
// - its exchange is hidden when H steps of compute last kHideFactor times the measured
//   exchange, and H is at least kMinOverlappedLocalSteps: an overlapped exchange moves on
//   only between steps, a chunk and a relay at a time, so shorter rounds do not hide even a
//   fast link's (measured at 10 Mbit/s: overlapped H 10 took 1600 steps to one worker's
//   loss, H 20 1000).
constexpr double kFreeLocalSteps = 25, kCostPerDoubling = 0.25, kOverlapCost = 0.02, kHideFactor = 1.5;
constexpr std::int64_t kMinOverlappedLocalSteps = 20;
// --fragments auto with one server: overlapped rounds stream 2 fragments. Measured to one
// worker's loss (docs/benchmarks.md, 2026-12-06, streamed rounds): 2 fragments reached it
// sooner than the whole model at 10 Mbit/s (1.85x and 1.63x against 1.65x and 1.54x) and at 2
// Mbit/s (1.43x and 1.44x against 1.37x and 1.33x with the server on a host of its own), and
// at equal steps lower; 4 fragments lower still at equal steps but no sooner (1.36x, 1.28x:
// rounds of 13 to 15 steps cost time).
constexpr int kAutoFragments = 2;

// The steps to a loss of rounds of H local steps, over sync's (the model above).
double roundsSteps(std::int64_t localSteps, bool overlap);
// The seconds per step of such rounds, a step taking `stepSeconds` and an exchange
// `exchangeSeconds`: the exchange added to each round, or overlapped, hidden (or not).
double roundsStepSeconds(std::int64_t localSteps, bool overlap, double stepSeconds, double exchangeSeconds);

// What the rounds are from the decision on, and why: the predicted time to a loss of the
// choice and of the other way (overlapped or not), as seconds per step of sync's quality.
// Streaming rounds (--fragments P, overlapped rounds only; Streaming DiLoCo, Douillard et
// al. 2025): the weights are cut into `fragments` ranges (fragmentRanges), and a round
// exchanges one of them, in turn (fragment r mod P of the r-th streamed round, counted alike
// by rank 0 and every worker), so a fragment's exchange is a P-th of the model's and each
// fragment is exchanged every P rounds; a round is then H / P local steps (`localSteps`),
// and each fragment's rounds still span H. The round that ends the run exchanges the whole
// model, so that no fragment's last rounds of progress are lost.
struct RoundsDecision {
  std::int64_t localSteps = 0;  // a round's local steps: H, or streamed, H / P
  bool overlap = false;
  int fragments = 1;  // 1: each round exchanges the whole model
  double predicted = 0, otherPredicted = 0;  // 0: fixed by the flags, nothing compared
  std::int64_t otherLocalSteps = 0;
};
// `plan`'s decision given the measuring rounds' `stepSeconds`, the slowest worker's seconds
// per local step, and `exchangeSeconds`: each auto choice minimizes
// roundsSteps x roundsStepSeconds. An auto H with overlap is the smallest in
// [kMinOverlappedLocalSteps, kMaxAutoLocalSteps] that hides the exchange (or the most, where
// none can); without, the best in [kMinAutoLocalSteps, kMaxAutoLocalSteps]. Auto overlap compares the two; a fixed H compares
// itself overlapped and not.
RoundsDecision chooseRounds(const RoundsPlan& plan, double stepSeconds, double exchangeSeconds);
// An auto H of overlapped rounds once running: a round whose period (as rank 0 sees it: from
// the last up message's end to this one's) was more than kUnhiddenShare over the slowest
// worker's compute, `computeSeconds` (the wall time of its local steps: RoundsWorker.cpp's
// RoundTotals), did not hide its exchange (the workers waited for the last round's): H
// grows to kRaiseMargin times the steps the period took, at most kMaxAutoLocalSteps.
// Otherwise, H. It never shrinks: the measuring rounds see a link's bursts, not what it
// sustains under overlap.
constexpr double kUnhiddenShare = 0.1, kRaiseMargin = 1.25;
std::int64_t raisedLocalSteps(std::int64_t localSteps, double periodSeconds, double computeSeconds);
// "overlapped rounds of 82 local steps hide the exchange: 0.032 s a step of sync's quality,
// against 0.049 at 200 not overlapped": why, for stdout and the probe.
std::string whyRounds(const RoundsDecision& d);

// The weights' floats [begin, end) of each of `fragments` streamed fragments: contiguous,
// balanced by floats (Ranges.h's keyRanges).
std::vector<exchanges::KeyRange> fragmentRanges(const models::Net& model, int fragments);

// The chains a run's rounds travel on: lane 0 the whole model's (with K servers cut by their
// ranges), then with --fragments P one per fragment (fragmentRanges), each a RoundChain of
// its own (its codecs' error feedback its own). One exchange is in flight at a time over all
// of them (a rank finishes one before it starts the next), so they share the chain's tags,
// matched in order. `upFixed`, `downFixed`, `codecs`, `seed`: RoundChain's.
struct Lane {
  std::int64_t begin = 0, count = 0;  // the weights' floats it carries
  std::unique_ptr<RoundChain> chain;
  std::int64_t lastSpan = 0;  // a worker's: the steps of the run its last round spanned
};
std::vector<Lane> roundLanes(comm::Communicator& comm, const models::Net& model, const config::TrainConfig& cfg,
                             std::int64_t upFixed, std::int64_t downFixed, const RoundChain::Codecs& codecs,
                             std::uint64_t seed);

// Which lane a round's exchange takes: a streamed round's (RoundsDecision::fragments) the
// next fragment's, in turn, counted alike by rank 0 and every worker; any other round's, and
// the one that ends the run, the whole model's. Throws CommError where a decision streams
// other fragments than this rank's --fragments made.
class LaneSchedule {
 public:
  explicit LaneSchedule(int fragments) : fragments_(fragments) {}
  std::size_t next(const RoundsDecision& d, bool endsRun);

 private:
  const int fragments_;
  std::int64_t streamed_ = 0;
};

// A down message begins with the decision the workers follow from their next round on, as
// kDecisionFloats floats; readDecision throws CommError on values no server sends.
constexpr std::size_t kDecisionFloats = 3;
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
