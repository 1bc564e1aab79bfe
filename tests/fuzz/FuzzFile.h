#pragma once
// The readers under fuzzing take paths: the input goes to a per-process file in /dev/shm
// (or /tmp), rewritten for every run.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

namespace pstrain::fuzz {

inline std::string writeInput(const std::uint8_t* data, std::size_t size, const std::string& name) {
  static const std::string dir = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
  std::string path = dir + "/pstrain-fuzz-" + std::to_string(::getpid()) + "-" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
  return path;
}

}  // namespace pstrain::fuzz
