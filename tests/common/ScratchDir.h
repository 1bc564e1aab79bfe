#pragma once
// A fresh, empty directory under the system temp dir for one test, removed afterwards.
#include <unistd.h>

#include <filesystem>
#include <string>

#include "runtime/rundir/AtomicFile.h"

namespace pstrain::testsupport {

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() /
              ("pstrain-" + name + "-" + std::to_string(::getpid()))) {
    rundir::removeTree(path_.string());
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    try {
      rundir::removeTree(path_.string());
    } catch (const std::exception&) {
    }
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace pstrain::testsupport
