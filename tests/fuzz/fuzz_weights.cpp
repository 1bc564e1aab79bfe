// libFuzzer target: pretrained weights (--init-from: checkpoint/WeightsFile) as torch.save's
// archive of a state dict or as safetensors must read or be refused with a ConfigError, never
// crash, hang or throw anything else. Mutated as archives (ArchiveMutator.h) as well as bytes.
#include <string>

#include "runtime/Errors.h"
#include "runtime/checkpoint/WeightsFile.h"
#include "tests/fuzz/ArchiveMutator.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    pstrain::checkpoint::readWeights(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  } catch (const pstrain::ConfigError&) {
  }
  return 0;
}
