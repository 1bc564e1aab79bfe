#pragma once
// What --memory (fast or lean, as the run resolved it) means for a rank's transfers: how many
// of its messages are out at once, a server's receive slots for raw parts, and whether the
// pages of what it has sent go back. The links (StepLink, RangesLink, ServedRange, the
// rounds worker) follow it, and the memory plan (training/MemoryPlan) counts by it: a rule
// changed here changes both. Torch-free.
#include <cstddef>
#include <cstdint>

#include "runtime/config/RunPlan.h"

namespace pstrain::config {

class MemoryPolicy {
 public:
  explicit MemoryPolicy(const RunPlan& run);

  // Lean: a rank gives back the pages of each message it has sent, and of a local step's
  // gradient after the step (the next backward writes every float of it again).
  bool givesPagesBack() const { return lean_; }

  // How many messages of `messageBytes` each a sender keeps out before it waits for the
  // oldest. Fast: all of them. Lean: its bytes in flight's worth (16 MiB, lean's least, plus
  // what the plan spares it: RunPlan::leanSpareMib), and never fewer than two (one on the
  // wire, the next queued).
  std::size_t sendWindow(std::int64_t messageBytes) const;

  // What a worker's messages in flight hold beyond its measured step (which gives each
  // bucket back at once: roles::measureStep), for a gradient of `gradientBytes`. Only a
  // worker that streams its gradient (TrainConfig::streamsGradients) has any: lean, its
  // window's bytes, at most the gradient; fast keeps the whole gradient instead (the
  // exchange's keptGradient). One that does not stream sends from the gradient its measured
  // step already holds: nothing more.
  double workerInFlightBytes(double gradientBytes, bool streams) const;

  // A server's receive slots for `messages` raw parts of `slotBytes` each, from `workers`
  // workers at once (none of them landing in place). Fast: one for every message, all
  // posted at once, so that every worker sends as fast as the links take them. Lean: two a
  // worker (each worker's next part on its way while one is added), and as many more as
  // the plan spares the server, up to fast's.
  std::size_t receiveSlots(std::size_t messages, int workers, std::size_t slotBytes) const;
  // The bytes of those slots for every raw part of a range of `rangeFloats` from each of
  // `workers` workers (a slot: a part, at most the range).
  double receiveSlotBytes(std::int64_t rangeFloats, int workers) const;

  static constexpr double kLeanInFlightMib = 16;  // a lean sender's least in flight

 private:
  bool lean_;
  std::int64_t senderBytes_;     // lean: a sender's bytes in flight
  std::int64_t serverSpareBytes_;  // lean: a server's slots beyond two a worker
};

}  // namespace pstrain::config
