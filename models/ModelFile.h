#pragma once
// A model file, open by one descriptor and read once into an image of its bytes, except the
// data of its large storages (the parameters' records of 1 MiB or more): those are read
// from the file only into the tensors that need them, so that a rank never holds the file
// and its tensors together, and a server of K > 1 reads only its key range (ScriptModel.h).
// The image is what is checked and loaded; a storage's bytes read later are data, and the
// file must not have changed by then (its size, modification time and inode as when opened).
// Torch-free.
#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/Portable.h"

namespace pstrain::models {

class ModelFile {
 public:
  static constexpr std::uint64_t kLargeStorageBytes = std::uint64_t(1) << 20;

  // Opens the regular file `path` (ConfigError naming what to do when it is missing or not a
  // regular file) and reads its image.
  explicit ModelFile(const std::string& path);
  // The regular file open as `fd` (not closed here), named `path` in errors: the check
  // process's standard input.
  ModelFile(int fd, const std::string& path);
  ~ModelFile();
  ModelFile(const ModelFile&) = delete;
  ModelFile& operator=(const ModelFile&) = delete;

  // The file's bytes; zeros (taking no memory) in the data of each large storage, or in
  // none when its zip directory cannot be read (the archive check then says what is wrong).
  std::string_view image() const { return {image_->data(), size_}; }
  // "crc32 1a2b3c4d, 123456 bytes" of the whole file: what the start-up handshake compares.
  const std::string& identity() const { return identity_; }
  // Whether [at, at + n) is exactly the data of a large storage, left out of image().
  bool leftOut(std::uint64_t at, std::size_t n) const;
  // [at, at + n) of the file: the image's bytes, and the left-out data that it overlaps read
  // from the file (a reader that reads a large storage otherwise than whole still gets it).
  void copy(std::uint64_t at, void* into, std::size_t n) const;
  // `n` bytes at `at` from the file itself. Throws ConfigError when the file has changed
  // since it was opened, or is shorter.
  void read(std::uint64_t at, void* into, std::size_t n) const;
  // Throws ConfigError when the file has changed since it was opened.
  void checkUnchanged() const;
  // The descriptor it reads (the check process is given it as its standard input).
  int descriptor() const { return fd_; }

 private:
  void load();
  void findLargeStorages();
  void readImage();

  std::string path_;
  int fd_ = -1;
  bool owned_ = false;
  struct stat opened_ {};
  std::size_t size_ = 0;
  std::unique_ptr<portable::FreshPages> image_;  // size_ bytes
  std::string identity_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> leftOut_;  // [begin, end), sorted, disjoint
};

}  // namespace pstrain::models
