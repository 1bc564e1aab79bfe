#include "runtime/roles/DeviceSync.h"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/mps.h>
#endif

namespace pstrain::roles {

void synchronize(c10::Device device) {
  if (device.is_cpu()) return;
#if TORCH_VERSION_MAJOR >= 2
  if (device.is_mps()) return torch::mps::synchronize();  // MPS has one queue per process
#endif
  c10::impl::VirtualGuardImpl(device.type()).getStream(device).synchronize();
}

}  // namespace pstrain::roles
