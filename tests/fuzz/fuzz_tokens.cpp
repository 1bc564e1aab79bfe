// libFuzzer target: the token-file reader (nanoGPT's flat train.bin, llm.c's headed .bin,
// NumPy's .npy of ids)
// must turn any input into a TokenFile whose every id can be copied out, or a DataError,
// nothing else; and validationPath any name into a path or a DataError.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "data/TokenFile.h"
#include "runtime/Errors.h"
#include "tests/fuzz/FuzzFile.h"

namespace {

void readWhole(const std::string& path) {
  try {
    const pstrain::data::TokenFile tokens(path);
    const std::uint64_t count = tokens.count();
    std::vector<std::int64_t> ids(static_cast<std::size_t>(std::min<std::uint64_t>(count, 4096)));
    if (ids.empty()) return;
    tokens.copy(0, ids.size(), ids.data());
    tokens.copy(count - ids.size(), ids.size(), ids.data());  // the end, too
    for (std::int64_t id : ids) {
      if (id < 0 || id > tokens.maxId()) __builtin_trap();
    }
    try {
      tokens.copy(count, 1, ids.data());  // past the end: an error, never a read
      __builtin_trap();
    } catch (const pstrain::DataError&) {
    }
  } catch (const pstrain::DataError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // Under both names: train.bin may be nanoGPT's flat file, other names only llm.c's.
  const std::string flat = pstrain::fuzz::writeInput(data, size, "tokens");
  static const std::string dir = flat + ".d";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(flat, dir + "/train.bin", std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(flat, dir + "/train.npy", std::filesystem::copy_options::overwrite_existing);
  readWhole(flat);
  readWhole(dir + "/train.bin");
  readWhole(dir + "/train.npy");
  try {
    (void)pstrain::data::validationPath(std::string(reinterpret_cast<const char*>(data), std::min<std::size_t>(size, 64)));
  } catch (const pstrain::DataError&) {
  }
  return 0;
}
