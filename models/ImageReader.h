#pragma once
// libtorch's reader of a model file's image (ModelFile.h): each read of a large storage's data
// whole is left to later (`defer`) or filled from the file; everything else comes from the
// image, and a read of part of a storage's data is refused (ConfigError).
#include <caffe2/serialize/read_adapter_interface.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "models/ModelFile.h"

namespace pstrain::models {

// A large storage that a load left unread: its memory (never written: where its pages are
// fresh, they take none) and where its bytes are in the file.
struct Deferred {
  void* data;
  std::uint64_t at;
  std::size_t bytes;
};

class ImageReader : public caffe2::serialize::ReadAdapterInterface {
 public:
  // `file` must outlive the reader.
  ImageReader(const ModelFile& file, bool defer) : file_(file), defer_(defer) {}
  size_t size() const override { return file_.image().size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= size()) return 0;
    n = std::min<size_t>(n, size() - pos);
    if (!file_.isStorageData(pos, n)) {
      file_.copyImage(pos, buf, n);
    } else if (defer_) {
      deferred_.push_back({buf, pos, n});
    } else {
      file_.fill(pos, buf, n);
    }
    return n;
  }
  // The reads left to later, in the order they came.
  std::vector<Deferred> takeDeferred() { return std::move(deferred_); }

 private:
  const ModelFile& file_;
  const bool defer_;
  mutable std::vector<Deferred> deferred_;
};

}  // namespace pstrain::models
