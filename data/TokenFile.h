#pragma once
// Token streams for language models: a file of token ids, read window by window with
// pread (never mapped: a file cut short while training is a DataError, not a SIGBUS), so
// that a file larger than memory trains and a rank's memory does not grow with it. Layouts:
//   nanoGPT's:  a flat array of little-endian uint16 ids, named train.bin (val.bin beside
//               it is the test split);
//   llm.c's:    a header of 256 int32 (magic, version, the token count, the rest 0) and then
//               the count's ids: magic 20240520 version 1 for uint16 ids, magic 20240801
//               version 7 for uint32 ids (vocabularies over 65,536, LLaMA-3's); any name,
//               its test split the name with its last "train" turned to "val"
//               (tiny_shakespeare_train.bin, ..._val.bin);
//   NumPy's:    an .npy array of one dimension, uint16 or uint32 (np.save(f, ids)), named
//               NAME_train.npy or train.npy (NAME_val.npy, val.npy beside it).
// A file that starts with an llm.c magic is read as llm.c's or refused (another version, a
// size its header does not give), whatever its name; a train.bin whose first int32 reads as
// a date (how llm.c's magics are made) is refused too: the ids are never guessed.
// Torch-free, so that it can be fuzzed; every error is a DataError naming the file.
#include <cstdint>
#include <string>

namespace pstrain::data {

// Where the ids of a token file start and how many there are.
struct TokenLayout {
  std::uint64_t offset = 0;  // bytes of header before the first id
  std::uint64_t count = 0;   // ids
  std::uint64_t idBytes = 2; // 2 (uint16) or 4 (uint32)
};

// The layout of a file of `fileSize` bytes named `path` whose first `headBytes` bytes (up to
// 1024) are at `head`. Throws DataError: an odd size, an llm.c header with another magic,
// version or count, too few bytes.
TokenLayout tokenLayout(const unsigned char* head, std::size_t headBytes, std::uint64_t fileSize,
                        const std::string& path);

// The test split beside a train file (see above); throws DataError when the name says none.
std::string validationPath(const std::string& trainPath);

class TokenFile {
 public:
  explicit TokenFile(const std::string& path);  // opens it and reads its header; throws DataError
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  std::uint64_t count() const { return layout_.count; }
  // "uint16" or "uint32": how its ids are stored.
  const char* idType() const;
  // The largest id (one pass over the file with read(2), so that it does not stay mapped).
  std::uint32_t maxId() const { return maxId_; }
  // "N tokens, crc32 of the first and last MiB ..." : what ranks compare at start-up.
  const std::string& identity() const { return identity_; }

  // Ids [offset, offset + n) as int64 into `out` (read from the page cache: nothing stays in
  // this process). Thread-safe. Throws DataError when the file no longer holds them.
  void copy(std::uint64_t offset, std::uint64_t n, std::int64_t* out) const;

 private:
  std::uint32_t idAt(const unsigned char* ids, std::uint64_t i) const;  // the i-th id from `ids`

  std::string path_;
  int fd_ = -1;
  std::uint64_t fileSize_ = 0;
  TokenLayout layout_;
  std::uint32_t maxId_ = 0;
  std::string identity_;
};

}  // namespace pstrain::data
