#pragma once
// What every server loop shares (exchanges/collective, exchanges/point_to_point and
// exchanges/rounds/RoundsServer.cpp): rank 0's state, the timing of an update and of a
// loop's period, and the announcement of the run before the loop.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/metrics/Clock.h"
#include "runtime/protocol/StepProtocol.h"
#include "runtime/roles/RoleArgs.h"
#include "runtime/roles/StepStats.h"
#include "runtime/roles/UpdateState.h"

namespace pstrain::roles {

// The server's state: the model's parameters are views into the down message (so nothing
// is copied before a send), holding args.resume's weights and update state if any, or the
// model's initial weights (those it holds: Net::heldWeights; the rest of the message stays
// zeros and takes no memory). `stepLink`: whether the loop sends the step messages through
// UpdateState's StepLink.
struct Server : UpdateState {
  Server(const RoleArgs& a, bool stepLink);
  void setHeader(std::int64_t step, protocol::Control control, double lr = 0);
  const std::string stopContext = "stop";
  const bool resumed;  // from a checkpoint (args.resume), not the model's initial weights
  const std::vector<std::int64_t> resumedBatches;  // its Checkpoint::workerBatches (point to point's)
};

// Wall and CPU seconds of the update's parts within a step.
struct UpdateTime {
  double seconds = 0, cpuSeconds = 0;
  template <typename F>
  void add(F&& part) {
    const auto start = metrics::Clock::now();
    const double cpuStart = metrics::processCpuSeconds();
    part();
    seconds += metrics::secondsSince(start);
    cpuSeconds += metrics::processCpuSeconds() - cpuStart;
  }
};

// A collective loop's period: from the end of one down message to the end of the next, the
// span of the workers' batches (or rounds), so that the slowest one's time can be taken from
// it. After a down message the workers compute while the server records (and may write a
// checkpoint), which is part of the next period.
struct Period {
  metrics::Clock::time_point start = metrics::Clock::now();
  double cpuStart = metrics::processCpuSeconds();

  // The accounting of the period that ends now, summed over `contributors`; the next one
  // begins. The update's time is apart from the exchange's unless it ran within it
  // (`updateWithin`: overlap's bucket updates run while later buckets travel).
  StepStats close(Server& s, int contributors, const UpdateTime& update, bool updateWithin, bool applied);
};

// The server's announcement of the run (its mode, then what `details` says of the exchange
// in parentheses if anything, workers, steps, model and data), then `loop` on a Server made
// with `stepLink`, until every step is done (or --max-seconds, or a stop request).
// `details` may refuse the run (throws ConfigError) before anything is said.
void runServer(const RoleArgs& args, void (*loop)(Server&), std::string (*details)(const Server&) = nullptr,
               bool stepLink = true);

}  // namespace pstrain::roles
