#pragma once
// --precision on a worker: its forward pass (and loss) under torch.autocast's rules for its
// device, in the row's dtype; the weights, the gradients and the optimizer stay float32.
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "runtime/config/Devices.h"

namespace pstrain::roles {

// Throws ConfigError when this libtorch does not autocast on `device` to `precision`, naming
// both and what would; fp32 is fine everywhere. Call it on every computing rank at start-up
// (the dry run too), before any step.
void checkPrecision(c10::Device device, const config::PrecisionInfo& precision);

// While alive, the calling thread computes on `device` as `with torch.autocast(device_type,
// dtype)` does: the ops autocast lists run in the precision's dtype, the others in float32.
// fp32 does nothing. Autocast state is thread-local: make the scope on the thread that runs
// forward. Leaving the outermost scope drops the casts of the weights autocast cached (they
// change every step).
class AutocastScope {
 public:
  AutocastScope(c10::Device device, config::PrecisionKind precision);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType type_;
  bool active_ = false;
  bool wasEnabled_ = false;
  c10::ScalarType previousType_ = c10::ScalarType::Float;
};

}  // namespace pstrain::roles
