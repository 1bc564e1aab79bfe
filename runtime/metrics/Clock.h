#pragma once
// The clocks every timing in pstrain reads: seconds since a steady-clock point, and the
// UTC wall time as run files record it.
#include <chrono>
#include <string>

namespace pstrain::metrics {

using Clock = std::chrono::steady_clock;

inline double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// `seconds` as the clock's duration (for deadlines: now() + toDuration(s)).
inline Clock::duration toDuration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Seconds on the steady clock (only differences mean anything).
inline double steadySeconds() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// CPU time of this process so far (every thread), seconds.
double processCpuSeconds();

// Now as "2026-11-23T13:42:07Z".
std::string isoTime();

}  // namespace pstrain::metrics
