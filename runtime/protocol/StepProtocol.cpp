#include "runtime/protocol/StepProtocol.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "runtime/Errors.h"

namespace pstrain::protocol {

StepHeader parseStepHeader(const void* bytes, std::size_t size) {
  StepHeader header;
  if (size < sizeof header) throw CommError(fmt::format("step message of {} bytes has no header", size));
  std::memcpy(static_cast<void*>(&header), bytes, sizeof header);
  const auto control = static_cast<std::int32_t>(header.control);
  if (control < static_cast<std::int32_t>(Control::Train) || control > static_cast<std::int32_t>(Control::Retry) ||
      header.step < 0 || header.epoch < 0 || !(std::isfinite(header.lossScale) && header.lossScale > 0)) {
    throw CommError(fmt::format("garbled step header from the server (control {}, step {}, epoch {}, loss scale {})",
                                control, header.step, header.epoch, header.lossScale));
  }
  return header;
}

std::int64_t trailerVersion(float value, int rank) {
  if (!std::isfinite(value) || value < 0 || value > static_cast<float>(kMaxVersionedSteps) || value != std::floor(value)) {
    throw CommError(fmt::format("rank {} sent a gradient of step {} (not a step number): a garbled message or "
                                "another pstrain version", rank, value));
  }
  return static_cast<std::int64_t>(value);
}

bool sameCount(double sent, double expected) {
  return std::isfinite(sent) && std::abs(sent - expected) <= std::max(0.5, 1e-6 * expected);
}

}  // namespace pstrain::protocol
