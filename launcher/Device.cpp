#include "launcher/Device.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <fmt/format.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include "runtime/Errors.h"
#include "runtime/config/Devices.h"

namespace pstrain::launcher {
namespace {

bool mpsAvailable() {
#if TORCH_VERSION_MAJOR > 1 || (TORCH_VERSION_MAJOR == 1 && TORCH_VERSION_MINOR >= 12)
  return at::hasMPS();
#else
  return false;
#endif
}

}  // namespace

bool deviceAvailable(c10::DeviceType type) {
  if (type == c10::kCUDA) return torch::cuda::is_available();
  if (type == c10::kMPS) return mpsAvailable();
  return type == c10::kCPU;
}

c10::Device chooseDevice(const std::string& wanted, int localRank) {
  const config::DeviceInfo& row = config::deviceInfo(wanted);
  auto device = [&](c10::DeviceType type) {
    if (!deviceAvailable(type)) {
      throw ConfigError(fmt::format("--device {}: this libtorch or machine lacks it (it needs {})", row.name, row.needs));
    }
    return type != c10::kCUDA ? c10::Device(type)
                              : c10::Device(type, static_cast<c10::DeviceIndex>(localRank % torch::cuda::device_count()));
  };
  switch (row.kind) {
    case config::DeviceKind::Cpu: return device(c10::kCPU);
    case config::DeviceKind::Mps: return device(c10::kMPS);
    case config::DeviceKind::Cuda: return device(c10::kCUDA);
    case config::DeviceKind::Auto:
      for (c10::DeviceType type : {c10::kMPS, c10::kCUDA}) {
        if (deviceAvailable(type)) return device(type);
      }
      return device(c10::kCPU);
  }
  throw InternalError(fmt::format("device '{}' has a row but no libtorch device", row.name));
}

BlasInfo processBlas() {
  const std::string config = at::show_config();  // "... BLAS_INFO=open, ..."
  const std::string key = "BLAS_INFO=";
  const std::size_t at = config.find(key);
  std::string built;
  if (at != std::string::npos) {
    const std::size_t begin = at + key.size();
    built = "BLAS_INFO " + config.substr(begin, config.find_first_of(", \n", begin) - begin);
  }
  return loadedBlas(built);
}

void setComputeThreads(int threads) {
  at::set_num_threads(threads);
  setBlasThreads(threads);
}

}  // namespace pstrain::launcher
