#include "runtime/roles/StepProtocol.h"

#include <fmt/format.h>

#include <cstring>

#include "runtime/Errors.h"

namespace pstrain::roles {

StepHeader parseStepHeader(const void* bytes, std::size_t size) {
  StepHeader header;
  if (size < sizeof header) throw CommError(fmt::format("step message of {} bytes has no header", size));
  std::memcpy(static_cast<void*>(&header), bytes, sizeof header);
  const auto control = static_cast<std::int32_t>(header.control);
  if (control < static_cast<std::int32_t>(Control::Train) || control > static_cast<std::int32_t>(Control::Retry) ||
      header.step < 0 || header.epoch < 0) {
    throw CommError(fmt::format("garbled step header from the server (control {}, step {}, epoch {})", control,
                                header.step, header.epoch));
  }
  return header;
}

}  // namespace pstrain::roles
