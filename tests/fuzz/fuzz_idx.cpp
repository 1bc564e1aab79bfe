// libFuzzer target: the IDX reader (plain and gzipped) must turn any input into an
// IdxArray or a DataError, nothing else.
#include "data/Idx.h"
#include "runtime/Errors.h"
#include "tests/fuzz/FuzzFile.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = pstrain::fuzz::writeInput(data, size, "idx");
  for (int rank : {1, 3}) {
    try {
      auto array = pstrain::data::readIdx(path, rank);
      std::size_t elements = 1;
      for (auto d : array.dims) elements *= static_cast<std::size_t>(d);
      if (array.bytes.size() != elements) __builtin_trap();
    } catch (const pstrain::DataError&) {
    }
  }
  return 0;
}
