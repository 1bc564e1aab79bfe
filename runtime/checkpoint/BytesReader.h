#pragma once
// libtorch's archive readers over bytes already in memory, never reading past their end:
// libtorch's own in-memory reader copies whatever range the zip directory names, so a
// crafted or damaged archive makes it read out of bounds (found by tests/fuzz). Checkpoints
// are read once into memory, checked (zip/ArchiveCheck.h), then loaded from the same bytes
// through this; a model file's image (models/ModelFile.h) is checked through it.
#include <caffe2/serialize/read_adapter_interface.h>

#include <algorithm>
#include <cstring>
#include <string_view>


namespace pstrain::checkpoint {

class BytesReader : public caffe2::serialize::ReadAdapterInterface {
 public:
  // `bytes` must outlive the reader.
  explicit BytesReader(std::string_view bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= bytes_.size()) return 0;
    n = std::min<size_t>(n, bytes_.size() - pos);
    std::memcpy(buf, bytes_.data() + pos, n);
    return n;
  }

 private:
  std::string_view bytes_;
};

}  // namespace pstrain::checkpoint
