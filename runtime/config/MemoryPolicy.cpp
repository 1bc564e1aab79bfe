#include "runtime/config/MemoryPolicy.h"

#include <algorithm>
#include <limits>

#include "runtime/Parts.h"

namespace pstrain::config {

namespace {
constexpr double kMib = 1 << 20;
}

MemoryPolicy::MemoryPolicy(const RunPlan& run)
    : lean_(run.leanMemory()),
      senderBytes_(static_cast<std::int64_t>((kLeanInFlightMib + run.leanSpareMib) * kMib)),
      serverSpareBytes_(static_cast<std::int64_t>(run.leanSpareMib * kMib)) {}

std::size_t MemoryPolicy::sendWindow(std::int64_t messageBytes) const {
  if (!lean_) return std::numeric_limits<std::size_t>::max();
  return static_cast<std::size_t>(std::max<std::int64_t>(2, senderBytes_ / std::max<std::int64_t>(1, messageBytes)));
}

double MemoryPolicy::workerInFlightBytes(double gradientBytes, bool streams) const {
  if (!lean_ || !streams) return 0;
  return std::min(static_cast<double>(senderBytes_), gradientBytes);
}

std::size_t MemoryPolicy::receiveSlots(std::size_t messages, int workers, std::size_t slotBytes) const {
  if (!lean_) return messages;
  const std::size_t spare = static_cast<std::size_t>(serverSpareBytes_) / std::max<std::size_t>(1, slotBytes);
  return std::min(messages, 2 * static_cast<std::size_t>(std::max(workers, 1)) + spare);
}

double MemoryPolicy::receiveSlotBytes(std::int64_t rangeFloats, int workers) const {
  if (rangeFloats <= 0 || workers <= 0) return 0;
  // ServedRange's slot: a part, the range's first (the largest).
  const std::size_t slotBytes = static_cast<std::size_t>(partSize(rangeFloats, 0)) * sizeof(float);
  const std::size_t slots = receiveSlots(static_cast<std::size_t>(partsOf(rangeFloats) * workers), workers, slotBytes);
  return static_cast<double>(slots) * static_cast<double>(slotBytes);
}

}  // namespace pstrain::config
