#pragma once
// What a long wait says (DESIGN.md: a long wait names who has not arrived). Every rank
// tells the others the step it waits in (MpiComm: a few bytes when its step changes, and a
// heartbeat now and then while a wait lasts), so a rank that has waited long names, in
// this order of preference:
//   1. the ranks it has not heard from lately: they neither wait nor answer (stopped,
//      hung, computing or writing for long), which is why everyone else waits;
//   2. else the ranks that have not reached its step;
//   3. else `awaited` (the root of a broadcast, the peer of a send or receive), or every
//      other rank: everyone is there, and the data themselves are slow.
// Torch-free and MPI-free.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace pstrain::comm {

// What a rank knows of another.
struct RankNews {
  std::int64_t lastStep = -1;  // the last step it said it waits in; < 0: none yet
  bool silent = true;          // not heard from lately (never: silent)
};

// Steps are 0-based, as the roles count them (currentStep()) and as every message names
// them: step S is the one after the progress line's "step S/..." (S steps done). `news`
// and `hosts` are indexed by rank; `hosts` may be empty (not known yet). `awaited` is a
// rank, or -1 for every other rank. Returns "rank 2 (mbp-1), last at step 813" or
// "rank 1 (a), last at step 9; rank 3 (b), no step yet".
std::string describeMissing(int self, std::int64_t mine, const std::vector<RankNews>& news,
                            const std::vector<std::string>& hosts, int awaited);

// "pstrain: step 814: waiting 60 s for <missing>" ("start-up" before the first step).
std::string stallLine(std::int64_t mine, double waitedSeconds, const std::string& missing);

// How long a wait has lasted while this process ran: a gap of more than a second between two
// looks at the clock (a wait looks every few milliseconds) is time it did not run (SIGSTOP,
// a laptop asleep), in which nobody waited for it and it waited for nobody. So a rank that
// was stopped neither gives up on the others nor names them as late once it runs again.
class WaitClock {
 public:
  using Clock = std::chrono::steady_clock;
  explicit WaitClock(Clock::time_point start) : previous_(start) {}
  // The seconds waited from the start to `now` (each call later than the one before), less
  // the gaps.
  double waited(Clock::time_point now) {
    if (now - previous_ <= kMaxGap) waited_ += now - previous_;
    previous_ = now;
    return std::chrono::duration<double>(waited_).count();
  }

 private:
  static constexpr std::chrono::seconds kMaxGap{1};
  Clock::time_point previous_;
  Clock::duration waited_{};
};

}  // namespace pstrain::comm
