#pragma once
// A model file, open by one descriptor and read once into an image of its bytes, except the
// data of its large storages: those are read from the file only into the tensors that need
// them, so that a rank never holds the file and its tensors together, and a server of K > 1
// reads only its key range (ScriptModel.h). Torch-free.
//
// The image's invariant: what is checked is byte for byte what is loaded.
//   - Every reader reads the image: the archive checks, the check process and libtorch's
//     loader alike. The only bytes served from elsewhere are a large storage's data, read
//     whole into its tensor (fill).
//   - The image is the file's bytes but for two things:
//       1. The data of each large storage: a stored record of kLargeStorageBytes or more,
//          named <root>/data/<key>, which data.pkl names (confirmStorages). No other
//          record's header or data, no data descriptor and no part of the zip directory
//          overlaps it, nor does another large storage: a file where one does is refused.
//          So no code, pickle or name can hide in bytes that the checks see as zeros.
//          These bytes read as zeros in the image (and take no memory); fill reads them
//          from the file, and refuses them unless they have the CRC-32 they had when the
//          image was read (an in-place rewrite since then, whatever its time stamps).
//       2. The names of the debug records (code/**.py.debug_pkl) in the central directory:
//          their last letter is '_', so libtorch never finds them. It would unpickle one to
//          format a TorchScript traceback, where a well-formed but unexpected pickle
//          crashes libtorch 1.13 (an empty tuple: SIGSEGV); no check can vouch for that
//          code's every assumption. Tracebacks then quote the serialized code instead.
//   - A read that overlaps a large storage's data other than exactly is refused, but for a
//     read that ends at the file's end (the zip reader's search for its end record), which
//     gets the image's bytes: the same as the checks read.
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/Portable.h"

namespace pstrain::models {

// The smallest storage record left out of the image (a fuzzing build sets a smaller one,
// so that its small inputs have some).
#ifndef PSTRAIN_LARGE_STORAGE_BYTES
#define PSTRAIN_LARGE_STORAGE_BYTES (std::uint64_t(1) << 20)
#endif

class ModelFile {
 public:
  static constexpr std::uint64_t kLargeStorageBytes = PSTRAIN_LARGE_STORAGE_BYTES;

  // Opens the regular file `path` (ConfigError naming what to do when it is missing or not a
  // regular file) and reads its image. Throws ConfigError for a file whose records overlap
  // a large storage's data.
  explicit ModelFile(const std::string& path);
  // The regular file open as `fd` (not closed here), named `path` in errors: the check
  // process's standard input.
  ModelFile(int fd, const std::string& path);
  ~ModelFile();
  ModelFile(const ModelFile&) = delete;
  ModelFile& operator=(const ModelFile&) = delete;

  // The image (above).
  std::string_view image() const { return {image_->data(), size_}; }
  // "crc32 1a2b3c4d, 123456 bytes" of the whole file: what the start-up handshake compares.
  const std::string& identity() const { return identity_; }
  // Whether [at, at + n) is exactly the data of a large storage.
  bool isStorageData(std::uint64_t at, std::size_t n) const;
  // The image's [at, at + n). Throws ConfigError for a read that overlaps a large storage's
  // data (but for one that ends at the file's end: see above).
  void copyImage(std::uint64_t at, void* into, std::size_t n) const;
  // A large storage's data ([at, at + n) as isStorageData says) from the file. Throws
  // ConfigError when they are not what they were when the image was read.
  void fill(std::uint64_t at, void* into, std::size_t n) const;
  // Throws ConfigError unless every large storage is one that data.pkl names: `named`, the
  // lower-case names of its storages' records (zip::ArchiveContents::storages).
  void confirmStorages(const std::set<std::string>& named) const;
  // The descriptor it reads (the check process is given it as its standard input).
  int descriptor() const { return fd_; }

 private:
  struct Storage {
    std::uint64_t begin, end;  // its data: [begin, end) of the file
    std::string name;          // its record's, in lower case
    std::uint32_t crc = 0;     // of its data, as the image was read
  };

  void load();
  void planImage();
  void readImage();
  void hideDebugRecords();
  // `n` bytes at `at` from the file itself; ConfigError when it is shorter.
  void read(std::uint64_t at, void* into, std::size_t n) const;

  std::string path_;
  int fd_ = -1;
  bool owned_ = false;
  std::size_t size_ = 0;
  std::unique_ptr<portable::FreshPages> image_;  // size_ bytes
  std::string identity_;
  std::vector<Storage> storages_;  // sorted by begin, disjoint
  std::vector<std::uint64_t> debugNames_;  // where the debug records' names end in the directory
};

}  // namespace pstrain::models
