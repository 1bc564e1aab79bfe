// The format row "npz" (Formats.h): NumPy .npz files of the user's: Npz.h parses them.
#include "data/Formats.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>

#include "data/MemoryBound.h"
#include "data/Npz.h"
#include "data/FormatParts.h"
#include "runtime/Errors.h"
#include "runtime/Text.h"
#include "runtime/config/TrainConfig.h"

namespace pstrain::data {
namespace {

namespace fs = std::filesystem;

// A path ending in .npz, or a file that starts as a zip archive does (and is no token file).
bool isNpz(const std::string& path) {
  if (endsWith(path, ".npz")) return true;
  if (config::isTokenFile(path)) return false;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  char head[4] = {};
  std::ifstream in(path, std::ios::binary);
  return in.read(head, 4) && std::string(head, 4) == std::string("PK\x03\x04", 4);
}

bool isIntegerDtype(const std::string& dtype) {
  return dtype == "u1" || dtype == "i2" || dtype == "u2" || dtype == "i4" || dtype == "i8";
}

// Array `name` of `npz` as a tensor of its own type (numpy's u1, i2, i4, i8, f4), or as
// int64 (uint16 has no torch type of its own in 1.13).
at::Tensor npzTensor(const NpzFile& npz, const std::string& name, const NpyArray& h) {
  static const std::map<std::string, c10::ScalarType> types = {
      {"u1", torch::kUInt8}, {"i2", torch::kInt16}, {"u2", torch::kInt16}, {"i4", torch::kInt32},
      {"i8", torch::kInt64}, {"f4", torch::kFloat32}, {"f8", torch::kFloat64}};
  at::Tensor t = torch::empty(h.shape, torch::TensorOptions().dtype(types.at(h.dtype)));
  npz.read(name, [&](const NpyArray&) { return t.data_ptr(); });  // straight into the tensor
  if (h.dtype == "u2") return t.to(torch::kInt64).bitwise_and_(0xffff);
  return t;
}

// The labels of `npz`'s array `name`: int64 class labels ([N], or [N, L]: one per position)
// from any integer type, float32 targets as they are.
at::Tensor npzLabels(const NpzFile& npz, const std::string& name) {
  const NpyArray h = npz.header(name);
  if (!isIntegerDtype(h.dtype) && h.dtype != "f4") {
    throw DataError(fmt::format("{}: '{}' is {}; labels are integer classes (uint8, int16, uint16, int32, int64), "
                                "or float32 targets for --loss mse", npz.path(), name, h.dtype));
  }
  if (h.shape.empty()) throw DataError(fmt::format("{}: '{}' is a scalar, not one label per sample", npz.path(), name));
  at::Tensor y = npzTensor(npz, name, h);
  return h.dtype == "f4" ? y : y.to(torch::kInt64);
}

// One integer scalar of `npz` (a flag or a count), or `otherwise` without it.
std::int64_t npzScalar(const NpzFile& npz, const std::string& name, std::int64_t otherwise) {
  if (!npz.has(name)) return otherwise;
  const NpyArray h = npz.header(name);
  if (!h.shape.empty() || !isIntegerDtype(h.dtype)) {
    throw DataError(fmt::format("{}: '{}' must be one integer (np.savez(..., {}=N))", npz.path(), name, name));
  }
  return npzTensor(npz, name, h).to(torch::kInt64).item<std::int64_t>();
}

// Classes of an .npz: its scalar 'classes' if any, else one more than the largest label of
// both splits (so pstrain and pseval agree); 0 for float targets. A label is in [0,
// classes) or `ignoreIndex`; labels out of range, or splits of different kinds, are
// DataErrors.
int npzClasses(const NpzFile& npz, const at::Tensor& train, const at::Tensor& test, std::int64_t ignoreIndex) {
  if (train.is_floating_point() != test.is_floating_point()) {
    throw DataError(fmt::format("{}: y_train and y_test must both be class labels or both float targets", npz.path()));
  }
  if (train.is_floating_point()) return 0;
  std::int64_t classes = 0;
  for (const at::Tensor& y : {train, test}) {
    const at::Tensor counted = y.masked_select(y.ne(ignoreIndex));
    if (counted.numel() && counted.min().item<std::int64_t>() < 0) {
      throw DataError(fmt::format("{}: a label is negative ({}); class labels are 0, 1, ... (or the --ignore-index, "
                                  "{})", npz.path(), counted.min().item<std::int64_t>(), ignoreIndex));
    }
    if (counted.numel()) classes = std::max(classes, counted.max().item<std::int64_t>() + 1);
  }
  const std::int64_t given = npzScalar(npz, "classes", 0);
  if (npz.has("classes")) {
    if (given < classes) {
      throw DataError(fmt::format("{}: a label is {} but 'classes' says {}", npz.path(), classes - 1, given));
    }
    classes = given;
  }
  if (classes < 1 || classes > (1 << 24)) throw DataError(fmt::format("{}: {} classes", npz.path(), classes));
  return static_cast<int>(classes);
}

// Per-channel statistics: 'mean' and 'std' of float32 or float64, one per channel (x's
// dimension 1), or one for all.
std::vector<double> npzStatistic(const NpzFile& npz, const std::string& name, std::int64_t channels) {
  const NpyArray h = npz.header(name);
  if ((h.dtype != "f4" && h.dtype != "f8") || h.shape.size() > 1 ||
      (h.elements() != 1 && static_cast<std::int64_t>(h.elements()) != channels)) {
    throw DataError(fmt::format("{}: '{}' must hold {} float(s), one per channel (x's dimension 1)", npz.path(), name,
                                channels));
  }
  const at::Tensor t = npzTensor(npz, name, h).to(torch::kFloat64).contiguous();
  std::vector<double> values(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
  for (double v : values) {
    if (!std::isfinite(v) || (name == "std" && v <= 0)) throw DataError(fmt::format("{}: '{}' holds {}", npz.path(), name, v));
  }
  if (values.size() == 1) values.assign(static_cast<std::size_t>(channels), values[0]);
  return values;
}

// Whether x of `npz` holds token ids: an integer type other than uint8, or uint8 with the
// scalar 'ids' set (np.savez(..., ids=1)); else they are pixels (uint8) or float32 values.
bool npzHoldsIds(const NpzFile& npz, const std::string& name, const NpyArray& x) {
  if (!isIntegerDtype(x.dtype) && x.dtype != "f4") {
    throw DataError(fmt::format("{}: '{}' is {}; samples are uint8 (pixels, scaled by 1/255), float32, or integer "
                                "token ids (int16, uint16, int32, int64; uint8 with ids=1): convert with "
                                "x.astype(np.float32) or x.astype(np.int64)", npz.path(), name, x.dtype));
  }
  const bool ids = npzScalar(npz, "ids", 0) != 0;
  if (ids && !isIntegerDtype(x.dtype)) throw DataError(fmt::format("{}: 'ids' is set but x is {}, not integers", npz.path(), x.dtype));
  return ids || (isIntegerDtype(x.dtype) && x.dtype != "u1");
}


DatasetInfo npzInfo(const DataSource& source) {
  NpzFile npz(source.name);
  const NpyArray x = npz.header("x_train");
  const int classes = npzClasses(npz, npzLabels(npz, "y_train"), npzLabels(npz, "y_test"), source.ignoreIndex);
  return {source.name, "NumPy .npz file",
          std::vector<std::int64_t>(x.shape.begin() + std::min<std::size_t>(1, x.shape.size()), x.shape.end()), classes,
          "", "npz"};
}

Dataset loadNpz(const DataSource& source, Split split) {
  const std::string& path = source.name;
  NpzFile npz(path);
  const std::string xName = split == Split::Train ? "x_train" : "x_test";
  const std::string yName = split == Split::Train ? "y_train" : "y_test";
  const NpyArray xh = npz.header(xName);
  if (xh.shape.empty() || xh.shape[0] == 0) throw DataError(fmt::format("{}: '{}' holds no samples", path, xName));
  if (xh.elements() == 0) {
    throw DataError(fmt::format("{}: '{}' has shape [{}]: its samples hold no values", path, xName,
                                fmt::join(xh.shape, ", ")));
  }
  Dataset d;
  d.name = path;
  auto samples = std::make_shared<TensorSamples>();
  d.ids = samples->ids = npzHoldsIds(npz, xName, xh);
  at::Tensor trainLabels = npzLabels(npz, "y_train"), testLabels = npzLabels(npz, "y_test");
  d.classes = npzClasses(npz, trainLabels, testLabels, source.ignoreIndex);
  const at::Tensor& labels = samples->labels = split == Split::Train ? trainLabels : testLabels;
  if (labels.size(0) != xh.shape[0]) {
    throw DataError(fmt::format("{}: '{}' holds {} samples but '{}' {} labels", path, xName, xh.shape[0], yName,
                                labels.size(0)));
  }
  if (d.classes > 0 && labels.dim() > 2) {
    throw DataError(fmt::format("{}: '{}' must hold one class label per sample [N], or one per position [N, L]; it is "
                                "[{}]", path, yName, fmt::join(labels.sizes(), ", ")));
  }
  // Before the allocation: the split's samples must fit this host's memory, shared by its
  // ranks (each holds its own copy). Ids become int64 beside the file's array.
  requireMemoryFor(static_cast<double>(xh.elements()) * static_cast<double>(xh.itemSize + (d.ids ? 8 : 0)), path,
                   fmt::format("'{}'", xName));
  at::Tensor& x = samples->images = npzTensor(npz, xName, xh);
  if (d.ids) {
    x = x.to(torch::kInt64);
    const std::int64_t lowest = x.min().item<std::int64_t>();
    if (lowest < 0) throw DataError(fmt::format("{}: '{}' holds the id {}; token ids are 0, 1, ...", path, xName, lowest));
    d.maxId = x.max().item<std::int64_t>();
  }
  if (xh.dtype == "f4") {
    const float* values = x.data_ptr<float>();
    for (std::int64_t i = 0, n = x.numel(); i < n; ++i) {
      if (!std::isfinite(values[i])) {
        throw DataError(fmt::format("{}: '{}' holds {} at element {} (sample {}); every value must be finite", path,
                                    xName, values[i], i, i / std::max<std::int64_t>(1, n / xh.shape[0])));
      }
    }
  }
  if (npz.has("mean") != npz.has("std")) throw DataError(fmt::format("{}: give both 'mean' and 'std', or neither", path));
  if (npz.has("mean")) {
    if (d.ids) throw DataError(fmt::format("{}: 'mean' and 'std' normalise values; x holds token ids", path));
    const std::int64_t channels = xh.shape.size() > 1 ? xh.shape[1] : 1;
    samples->mean = npzStatistic(npz, "mean", channels);
    samples->std = npzStatistic(npz, "std", channels);
  }
  // Every member, not only the training arrays: mean, std and classes change what a rank
  // trains on too.
  std::vector<std::string> identity;
  for (const std::string& name : npz.names()) identity.push_back(fmt::format("{} crc32 {:08x}", name, npz.checksum(name)));
  d.fileIdentity = fmt::format("{}", fmt::join(identity, ", "));
  d.samples = std::move(samples);
  return d;
}

}  // namespace

const FormatRow kNpzFormat = {"npz",
    "a NumPy .npz file (x_train, y_train, x_test, y_test)",
    Yields::Labelled, isNpz, npzInfo, loadNpz, theFileItself};

}  // namespace pstrain::data
