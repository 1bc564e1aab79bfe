#pragma once
// Where a worker computes (--device of pstrain and pseval) and in what precision
// (--precision), one row each in two tables (Devices.cpp). launcher/Device.cpp maps a device
// row to the libtorch device and says whether this build and machine have it. Torch-free.
#include <string>
#include <vector>

namespace pstrain::config {

enum class DeviceKind { Auto, Cpu, Mps, Cuda };

struct DeviceInfo {
  DeviceKind kind;
  const char* name;
  const char* needs;  // what a build and machine must have for it ("" for any)
};

// Every device, in --help's order.
const std::vector<DeviceInfo>& devices();
// The row of `name`; throws ConfigError naming --`flag` and listing the names otherwise.
const DeviceInfo& deviceInfo(const std::string& name, const std::string& flag = "device");
// "auto | cpu | mps | cuda".
std::string deviceNames();
// The kind of a device as libtorch writes it (c10::Device::str(): "cpu", "mps", "cuda:1"):
// the row its name before any ":" names; throws InternalError for another.
DeviceKind deviceKindOf(const std::string& torchDevice);

// What a worker computes its forward pass in (--precision), one row each. The weights, the
// gradients and every optimizer state stay float32: bf16 autocasts the forward pass (and
// the loss) as torch.autocast does, with no loss scaling (bfloat16 has float32's range);
// bf16-weights also has the workers hold the weights in bfloat16 (their gradients come from
// them), while the servers keep the float32 master weights and the optimizer state and
// update them by torch's rule in float32 (mixed precision, the master weights where a
// parameter server keeps them anyway): half a worker's weights, half the weights' message.
// roles/Autocast says which devices this libtorch autocasts.
enum class PrecisionKind { Fp32, Bf16, Fp16 };

struct PrecisionInfo {
  PrecisionKind kind;
  const char* name;
  const char* help;
  bool autocasts;         // the forward pass computes in another dtype than float32
  bool scaledByDefault;   // --loss-scale auto turns dynamic loss scaling on (float16's range)
  bool bf16Weights = false;  // the workers hold the weights in bfloat16 (the servers: float32)
};

const std::vector<PrecisionInfo>& precisions();
const PrecisionInfo& precisionInfo(const std::string& name, const std::string& flag = "precision");
// "fp32 | bf16 | fp16 | bf16-weights".
std::string precisionNames();

}  // namespace pstrain::config
