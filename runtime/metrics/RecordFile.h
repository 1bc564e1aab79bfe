#pragma once
// A file that grows by whole records (metrics.jsonl's lines, a TensorBoard file's records):
// each append is one write(2) and, if it fails part-way (a full disk), the file is cut back
// to where it was, so that readers never see a torn record and later appends still line
// up. Each record is on its way to the disk when append() returns (no user-space buffer):
// a crash loses at most the record being written. Torch-free.
#include <string>

namespace pstrain::metrics {

class RecordFile {
 public:
  // Opens `path` for appending, creating it (0644 less the umask); a symbolic link is not
  // followed (an error: the record would land in whatever file it names). Throws
  // pstrain::Error.
  explicit RecordFile(std::string path);
  ~RecordFile();
  RecordFile(const RecordFile&) = delete;
  RecordFile& operator=(const RecordFile&) = delete;

  // Appends `record` whole, or not at all: throws pstrain::Error naming the file and why.
  void append(const std::string& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_;
};

}  // namespace pstrain::metrics
