#include "runtime/config/Devices.h"

#include <fmt/format.h>

#include "runtime/Errors.h"
#include "runtime/config/Table.h"

namespace pstrain::config {

const std::vector<DeviceInfo>& devices() {
  static const std::vector<DeviceInfo> table = {
      {DeviceKind::Auto, "auto", ""},
      {DeviceKind::Cpu, "cpu", ""},
      {DeviceKind::Mps, "mps", "a libtorch with Apple MPS (1.12 or newer, macOS) on Apple silicon or an AMD GPU"},
      {DeviceKind::Cuda, "cuda", "a CUDA build of libtorch and a visible NVIDIA GPU"},
  };
  return table;
}

std::string deviceNames() { return namesOf(devices()); }

const DeviceInfo& deviceInfo(const std::string& name, const std::string& flag) {
  return rowNamed(devices(), name, flag);
}

}  // namespace pstrain::config
