#include "launcher/Device.h"

#include <torch/cuda.h>
#include <torch/version.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>

#include "runtime/Errors.h"

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
  const bool mps = mpsAvailable();
  const bool cuda = torch::cuda::is_available();
  auto cudaDevice = [&] {
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(localRank % torch::cuda::device_count()));
  };
  if (wanted == "cpu") return c10::Device(c10::kCPU);
  if (wanted == "mps") {
    if (!mps) throw ConfigError("--device mps: this libtorch or machine has no Apple MPS");
    return c10::Device(c10::kMPS);
  }
  if (wanted == "cuda") {
    if (!cuda) throw ConfigError("--device cuda: this libtorch has no CUDA or no GPU is visible");
    return cudaDevice();
  }
  if (mps) return c10::Device(c10::kMPS);
  if (cuda) return cudaDevice();
  return c10::Device(c10::kCPU);
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
