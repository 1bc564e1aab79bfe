// libFuzzer target: the .npz reader must turn any input into arrays of the promised size or
// a DataError, nothing else.
#include <vector>

#include "data/Npz.h"
#include "runtime/Errors.h"
#include "tests/fuzz/FuzzFile.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = pstrain::fuzz::writeInput(data, size, "npz");
  try {
    pstrain::data::NpzFile npz(path);
    for (const auto& name : npz.names()) {
      try {
        std::vector<unsigned char> out;
        auto array = npz.read(name, [&](const pstrain::data::NpyArray& a) {
          if (a.elements() * a.itemSize > (1u << 24)) throw pstrain::DataError("too big for the fuzzer");
          out.resize(a.elements() * a.itemSize + 1);
          return static_cast<void*>(out.data());
        });
        if (out.size() != array.elements() * array.itemSize + 1) __builtin_trap();
      } catch (const pstrain::DataError&) {
      }
    }
  } catch (const pstrain::DataError&) {
  }
  return 0;
}
