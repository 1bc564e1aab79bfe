#pragma once
// Where a worker computes (--device of pstrain and pseval), one row each in one table
// (Devices.cpp). launcher/Device.cpp maps a row to the libtorch device and says whether this
// build and machine have it. Torch-free.
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

}  // namespace pstrain::config
