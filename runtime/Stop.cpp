#include "runtime/Stop.h"

#include <mutex>

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

namespace {

struct TerminationCleanup {
  std::mutex lock;
  std::function<void()> cleanup;
};

TerminationCleanup& terminationCleanup() {
  static TerminationCleanup* const state = new TerminationCleanup;  // never destroyed: used until _exit
  return *state;
}

}  // namespace

void setTerminationCleanup(std::function<void()> cleanup) {
  TerminationCleanup& state = terminationCleanup();
  std::lock_guard<std::mutex> hold(state.lock);
  state.cleanup = std::move(cleanup);
}

void runTerminationCleanup() {
  TerminationCleanup& state = terminationCleanup();
  state.lock.lock();  // never unlocked: the process ends
  if (!state.cleanup) return;
  try {
    state.cleanup();
  } catch (...) {
    // Ending anyway: the next start reports what is left (TrainDir).
  }
}

}  // namespace pstrain
