// libFuzzer target: the hub's shards (--init-from a folder: checkpoint/WeightsFile) under a
// forged model.safetensors.index.json, beside two sound shards: every tensor must read or the
// folder be refused with a ConfigError, never crash, hang or throw anything else (a shard
// named outside the folder, missing, twice, a tensor placed in the wrong shard or nowhere,
// JSON nested deep or not UTF-8 among the inputs).
#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/Errors.h"
#include "runtime/checkpoint/WeightsFile.h"
#include "tests/fuzz/FuzzFile.h"

namespace {

// A safetensors file of one F32 tensor `name` of 2 elements.
std::string shard(const std::string& name) {
  std::string header = "{\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>(header.size() >> (8 * i) & 0xFF);
  return out + header + std::string(8, '\x01');
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fs = std::filesystem;
  static const fs::path dir = [] {
    const fs::path d = fs::path(pstrain::fuzz::writeInput(nullptr, 0, "shards")).string() + ".d";
    fs::create_directories(d);
    std::ofstream(d / "model-00001-of-00002.safetensors", std::ios::binary) << shard("a.weight");
    std::ofstream(d / "model-00002-of-00002.safetensors", std::ios::binary) << shard("b.weight");
    return d;
  }();
  std::ofstream(dir / "model.safetensors.index.json", std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  try {
    pstrain::checkpoint::WeightsReader(dir.string()).readAll();
  } catch (const pstrain::ConfigError&) {
  }
  return 0;
}
