#pragma once
// libtorch's archive readers over bytes already in memory, never reading past their end:
// libtorch's own in-memory reader copies whatever range the zip directory names, so a
// crafted or damaged archive makes it read out of bounds (found by tests/fuzz). Checkpoints
// and model files are read once into memory, checked (zip/ArchiveCheck.h), then loaded
// from the same bytes through this.
#include <c10/util/Exception.h>
#include <caffe2/serialize/read_adapter_interface.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/Portable.h"

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

// A BytesReader that gives back the bytes of the big records it has read: a read of
// kReleaseBytes or more moves them (portable::moveBytes: their pages go back as they are
// copied), so that loading a model file holds its bytes and the tensors made of them
// together a few MiB at a time: not whole, not even a record's. For
// a reader that reads each big record once, as torch::jit::load does (tensors that share a
// storage share its one record): such bytes read again throw c10::Error, never come back
// as zeros.
class ReleasingBytesReader : public caffe2::serialize::ReadAdapterInterface {
 public:
  static constexpr size_t kReleaseBytes = size_t(1) << 20;

  // `bytes` must outlive the reader; afterwards their contents are undefined.
  explicit ReleasingBytesReader(std::string& bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* what) const override {
    if (pos >= bytes_.size()) return 0;
    n = std::min<size_t>(n, bytes_.size() - pos);
    for (const auto& [begin, end] : released_) {
      TORCH_CHECK(pos + n <= begin || pos >= end, "bytes ", begin, "..", end,
                  " of the archive were read once and given back; ", what ? what : "a reader", " read them again");
    }
    if (n < kReleaseBytes) {
      std::memcpy(buf, bytes_.data() + pos, n);
      return n;
    }
    portable::moveBytes(buf, bytes_.data() + pos, n);  // not even a record is ever held twice
    released_.emplace_back(pos, pos + n);
    return n;
  }

 private:
  std::string& bytes_;
  mutable std::vector<std::pair<uint64_t, uint64_t>> released_;  // [begin, end) read and given back
};

}  // namespace pstrain::checkpoint
