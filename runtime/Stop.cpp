#include "runtime/Stop.h"

namespace pstrain {

std::atomic<std::int64_t>& currentStep() {
  static std::atomic<std::int64_t> step{-1};
  static_assert(std::atomic<std::int64_t>::is_always_lock_free, "read from a signal handler");
  return step;
}

std::atomic<bool>& stopRequested() {
  static std::atomic<bool> requested{false};
  static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");
  return requested;
}

std::atomic<bool>& stoppedOnRequest() {
  static std::atomic<bool> stopped{false};
  return stopped;
}

}  // namespace pstrain
