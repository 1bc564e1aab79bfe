#pragma once
#include <c10/core/Device.h>

#include <string>

namespace pstrain::launcher {

// The device for --device `wanted`: "auto" takes Apple MPS if available, else CUDA (the GPU
// numbered localRank modulo the GPU count), else the CPU. Asking for a device this build
// or machine lacks is a ConfigError.
c10::Device chooseDevice(const std::string& wanted, int localRank);

}  // namespace pstrain::launcher
