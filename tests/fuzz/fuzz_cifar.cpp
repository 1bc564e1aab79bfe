// libFuzzer target: the CIFAR-10/100 reader turns any input into records or a DataError.
#include "data/Cifar.h"
#include "runtime/Errors.h"
#include "tests/fuzz/FuzzFile.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = pstrain::fuzz::writeInput(data, size, "cifar");
  for (int classes : {10, 100}) {
    try {
      auto arrays = pstrain::data::readCifar({path}, classes);
      if (arrays.pixels.size() != arrays.labels.size() * 3072) __builtin_trap();
      for (auto label : arrays.labels) {
        if (label >= classes) __builtin_trap();
      }
    } catch (const pstrain::DataError&) {
    }
  }
  return 0;
}
