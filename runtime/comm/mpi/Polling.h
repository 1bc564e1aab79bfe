#pragma once
// How MpiComm waits for a request: pollUntil's spins and pauses, the doorbell, heartbeats and
// stall reports, bounded by --timeout. Private to runtime/comm/mpi/.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <string>
#include <thread>

#include "runtime/Stop.h"
#include "runtime/comm/Stall.h"
#include "runtime/comm/mpi/Arrivals.h"
#include "runtime/comm/mpi/MpiCalls.h"
#include "runtime/metrics/Clock.h"

namespace pstrain::comm::mpi {

// Polls `done()` until it says true, sleeping between polls so that a rank that waits for
// slower peers does not steal a core from them. Each wake-up costs CPU, and a sleep lasts
// tens of microseconds longer than asked (timer slack, wake-up), so pauses start at 50 us
// and double, up to 2 ms (README, "Performance").
// A peer that posts something this rank waits for rings the doorbell (patience.bell; null:
// plain sleeps), which ends the pause at once. Then the next 64 polls spin, as at the start,
// and the pauses start again from 50 us: the data may still be on the way, and over TCP
// they move only while this rank polls.
// A wait that moves a large message (patience.bytes, 64 KiB or more; not a long wait) keeps
// its pauses at 50 us: such a message moves only while both ranks poll where shared memory
// has no single copy (macOS; a container without ptrace) and over TCP. With 2 ms pauses a
// 233 MB model took 1.39 s a step to cross shared memory so, 0.11 s without them (README,
// "Performance"; tools/bench-shm).
// A long wait (patience.longPauses: nothing can be on the way before a peer posts and
// rings) lets the pauses grow to 16 ms instead, until the first ring, once the doorbell has
// heard every rank (so that a ring will come). The server waiting for a step's first
// gradient bucket, through the workers' forward and most of backward, then wakes about
// half as often.
// With more ranks than cores, the spins rely on Open MPI's mpi_yield_when_idle (which
// MpiSession sets there): each idle MPI_Test then yields the core to a rank that computes.
// A wait that lasts patience.warnEvery prints who has not arrived, and again every interval.
// Time this process did not run counts for neither (WaitClock).
template <typename Done>
void pollUntil(Done done, double timeoutSeconds, const std::string& what, MpiComm::Patience patience) {
  using std::chrono::microseconds;
  WaitClock clock(metrics::Clock::now());  // waits count only while this process runs
  MpiComm::Arrivals* arrivals = patience.arrivals;
  const double warnEvery = arrivals ? arrivals->warnEvery() : 0;
  const double beatEvery = arrivals ? arrivals->beatEvery() : 0;
  int beats = 0;
  double nextWarning = warnEvery > 0 ? warnEvery : HUGE_VAL, nextBeat = warnEvery > 0 ? beatEvery : HUGE_VAL;
  constexpr int kSpins = 64;  // a short spin first: most waits on one host end in microseconds
  constexpr microseconds kFirstPause(50), kPollingCap(2000), kLongWaitCap(16000);
  constexpr std::size_t kLargeMessage = std::size_t(64) << 10;
  microseconds pause = kFirstPause;
  Doorbell* bell = patience.bell;
  const bool longWait = patience.longPauses && bell && bell->hearsEveryone();
  const bool noBackOff = patience.bytes >= kLargeMessage && !patience.longPauses;
  bool rung = false;  // in this wait
  for (int spins = kSpins;;) {
    if (done()) return;
    const double waited = clock.waited(metrics::Clock::now());
    if (waited > timeoutSeconds) {
      throw CommError(fmt::format(
          "{}: no answer from the other ranks within {} s (a rank died, hangs or is unreachable; "
          "raise --timeout if steps are really this slow){}",
          what, timeoutSeconds, warnEvery > 0 ? "; waiting for " + arrivals->missing(patience.awaited) : ""));
    }
    if (waited >= nextBeat) nextBeat = (arrivals->heartbeat(), beatEvery * (++beats + 1));
    if (waited >= nextWarning) {
      // One write, flushed: the line must show while the job hangs.
      std::cerr << stallLine(currentStep(), waited, arrivals->missing(patience.awaited)) + "\n" << std::flush;
      nextWarning = waited + warnEvery;
    }
    if (spins > 0) {
      --spins;
      continue;
    }
    if (!bell) {
      std::this_thread::sleep_for(pause);
    } else if (bell->sleep(pause)) {
      rung = true;
      spins = kSpins;
      pause = kFirstPause;
      continue;
    }
    if (noBackOff) continue;  // pause stays kFirstPause
    pause = std::min(pause * 2, longWait && !rung ? kLongWaitCap : kPollingCap);
  }
}

inline void waitFor(MPI_Request& request, double timeoutSeconds, const std::string& what, MpiComm::Patience patience,
             MPI_Status* status = MPI_STATUS_IGNORE) {
  pollUntil([&] {
    int done = 0;
    check(MPI_Test(&request, &done, status), what);
    return done != 0;
  }, timeoutSeconds, what, patience);
}

}  // namespace pstrain::comm::mpi
