#pragma once
// How a pstrain process stops: its exit codes, which pstrain-run acts on, and the flags a
// signal handler sets (lock-free, so async-signal-safe). Torch-free: the supervisor uses it.
#include <atomic>
#include <cstdint>
#include <functional>

namespace pstrain {

// pstrain's exit codes beyond 0 (done) and 1 (failed; pstrain-run relaunches with --resume).
constexpr int kConfigErrorExit = 2;  // the flags or the start-up checks refused the run: never retried
constexpr int kResumableExit = 3;    // stopped at a checkpoint on request (SIGUSR1): --resume continues

// The step this process is working on (-1 before the first), for diagnostics such as a
// signal handler's last words.
std::atomic<std::int64_t>& currentStep();

// Set (from a signal handler) when this process is asked to stop at the next step with a
// checkpoint, to be resumed (SIGUSR1; pstrain-run uses it to take hosts back). Rank 0
// decides when: the server, or its stop request in the allreduce trailer; gossip ranks each
// stop at their own next step.
std::atomic<bool>& stopRequested();
// Set by rank 0 when the run ended on such a request, before its last step: main() then
// exits with kResumableExit.
std::atomic<bool>& stoppedOnRequest();

// What must be undone when a stop signal ends the process at once (SIGTERM, SIGINT,
// SIGHUP): rank 0's train dir puts back the earlier run's files it set aside, until the new
// run's first checkpoint. pstrain's handler hands those signals to a thread of its own, so
// the cleanup is ordinary code that may allocate and touch files. One cleanup at a time; null
// clears it. Thread-safe: a call made while the cleanup runs waits, and never returns (the
// process ends), so nothing changes the files behind the cleanup's back.
void setTerminationCleanup(std::function<void()> cleanup);
// Runs the cleanup, if any, and keeps the lock: called once, just before _exit.
void runTerminationCleanup();

}  // namespace pstrain
