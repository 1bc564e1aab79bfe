#pragma once
// MpiComm's arrivals: who has reached which step, for the stall reports and the timeout's
// words (comm/Stall.h). Private to runtime/comm/mpi/.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/Stop.h"
#include "runtime/comm/Stall.h"
#include "runtime/comm/mpi/MpiCalls.h"
#include "runtime/comm/mpi/MpiComm.h"
#include "runtime/metrics/Clock.h"

namespace pstrain::comm::mpi {

constexpr int kArrivalTag = 1;  // the step messages use tag 0

// Every rank's last step as it told this one, and when this one last heard from it:
// kArrivalTag messages of one int64, sent to every other rank when this rank first waits in
// a step and, as heartbeats, every beatEvery() while a wait lasts. Read when this rank
// changes step (so that they never pile up in MPI's queue of unexpected messages), at each
// of its own heartbeats, and when a wait needs them. A send to a rank whose previous one is
// still out is skipped: that rank hears the newer step at the next.
struct MpiComm::Arrivals {
  explicit Arrivals(const MpiComm& comm)
      : comm(comm), last(comm.size_, -1), heard(comm.size_, -1e300), out(comm.size_, 0),
        sends(comm.size_, MPI_REQUEST_NULL) {}
  ~Arrivals() {
    for (auto& request : sends) {
      if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);  // completes on its own
    }
  }

  // --stall-warning capped by --timeout; 0: no stall reports, no heartbeats.
  double warnEvery() const { return std::min(comm.stallWarningSeconds(), comm.timeoutSeconds()); }
  double beatEvery() const { return std::min(1.0, warnEvery() / 4); }

  void announce(std::int64_t step) {
    if (step == announced || warnEvery() <= 0) return;
    announced = step;
    heartbeat();
  }

  void heartbeat() {
    for (int r = 0; r < static_cast<int>(sends.size()); ++r) {
      if (r == comm.rank_) continue;
      int done = 1;
      if (sends[r] != MPI_REQUEST_NULL) check(MPI_Test(&sends[r], &done, MPI_STATUS_IGNORE), "telling the step");
      if (!done) continue;
      out[r] = announced;
      check(MPI_Isend(&out[r], 1, MPI_INT64_T, r, kArrivalTag, MPI_COMM_WORLD, &sends[r]), "telling the step");
    }
    drain();
  }

  // Who this rank waits for (Stall.h): silent are the ranks not heard from in three
  // heartbeats.
  std::string missing(int awaited) {
    drain();
    const double now = metrics::steadySeconds();
    std::vector<RankNews> news(last.size());
    for (std::size_t r = 0; r < news.size(); ++r) news[r] = {last[r], now - heard[r] > 3 * beatEvery()};
    return describeMissing(comm.rank_, currentStep(), news, comm.hosts_, awaited);
  }

 private:
  void drain() {
    for (;;) {
      int found = 0;
      MPI_Status status;
      check(MPI_Iprobe(MPI_ANY_SOURCE, kArrivalTag, MPI_COMM_WORLD, &found, &status), "reading the others' steps");
      if (!found) return;
      std::int64_t step = 0;
      check(MPI_Recv(&step, 1, MPI_INT64_T, status.MPI_SOURCE, kArrivalTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
            "reading the others' steps");
      last[status.MPI_SOURCE] = std::max(last[status.MPI_SOURCE], step);
      heard[status.MPI_SOURCE] = metrics::steadySeconds();
    }
  }

  const MpiComm& comm;
  std::int64_t announced = -1;
  std::vector<std::int64_t> last;  // by rank
  std::vector<double> heard;       // by rank: steady seconds of the last message
  std::vector<std::int64_t> out;   // by rank: the value in flight
  std::vector<MPI_Request> sends;  // by rank
};

}  // namespace pstrain::comm::mpi
