#pragma once
// Waiting for an accelerator, the one call the device path needs beyond tensor copies.
#include <c10/core/Device.h>

namespace pstrain::roles {

// Returns once everything the calling thread queued on `device` (its current stream) has
// run; a no-op on the CPU. After a non-blocking copy into host memory, the data are there.
void synchronize(c10::Device device);

}  // namespace pstrain::roles
