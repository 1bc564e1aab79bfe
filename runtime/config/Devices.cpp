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

DeviceKind deviceKindOf(const std::string& torchDevice) {
  const std::string name = torchDevice.substr(0, torchDevice.find(':'));
  for (const auto& row : devices()) {
    if (row.kind != DeviceKind::Auto && name == row.name) return row.kind;
  }
  throw InternalError(fmt::format("a device '{}' that no row of config/Devices names", torchDevice));
}

std::string deviceNames() { return namesOf(devices()); }

const DeviceInfo& deviceInfo(const std::string& name, const std::string& flag) {
  return rowNamed(devices(), name, flag);
}

const std::vector<PrecisionInfo>& precisions() {
  static const std::vector<PrecisionInfo> table = {
      {PrecisionKind::Fp32, "fp32", "float32 throughout", false, false},
      {PrecisionKind::Bf16, "bf16", "the forward pass autocast to bfloat16 (CPU, CUDA; MPS with libtorch 2.6 or newer), "
                                    "float32 weights, gradients and optimizer", true, false},
      {PrecisionKind::Fp16, "fp16", "the forward pass autocast to float16 (CUDA; MPS with libtorch 2.5 or newer; the "
                                    "CPU where libtorch's autocast has it), with dynamic loss scaling (--loss-scale), "
                                    "float32 weights, gradients and optimizer", true, true},
      {PrecisionKind::Bf16, "bf16-weights", "bf16, and the workers hold the weights in bfloat16 (half their memory "
                                            "and the weights' message); the servers keep float32 master weights and "
                                            "the optimizer (sync, backup, async)", true, false, true},
  };
  return table;
}

std::string precisionNames() { return namesOf(precisions()); }

const PrecisionInfo& precisionInfo(const std::string& name, const std::string& flag) {
  return rowNamed(precisions(), name, flag);
}

}  // namespace pstrain::config
