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

#include "data/Cifar.h"
#include "data/Idx.h"
#include "data/MemoryBound.h"
#include "data/Npz.h"
#include "data/TokenFile.h"
#include "runtime/Errors.h"
#include "runtime/Text.h"
#include "runtime/config/TrainConfig.h"

namespace pstrain::data {
namespace {

namespace fs = std::filesystem;

// A built-in dataset's folder (--data-dir, else its own in dataRoot()), or the folder the
// user named.
std::string folderOf(const DataSource& source) {
  const DatasetInfo* named = namedDataset(source.name);
  if (!named) return source.name;
  return source.dir.empty() ? named->defaultDir : source.dir;
}

// What a file-backed format reads: every regular file under its folder, sorted (the folder
// itself when it is missing, so that ranks still compare something).
std::vector<std::string> filesUnder(const DataSource& source) {
  const std::string where = folderOf(source);
  std::vector<std::string> files;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(where, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_regular_file(ec)) files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  return files.empty() ? std::vector<std::string>{where} : files;
}

std::vector<std::string> theFileItself(const DataSource& source) { return {source.name}; }

bool isThere(const fs::path& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

// --- IDX (MNIST, Fashion-MNIST, or a folder of IDX files) ------------------------------------

// The first of "<stem>.gz" and "<stem>" that exists in `dir`, or "".
std::string idxFile(const std::string& dir, const std::string& stem) {
  for (const std::string& candidate : {stem + ".gz", stem}) {
    if (isThere(fs::path(dir) / candidate)) return (fs::path(dir) / candidate).string();
  }
  return "";
}

bool isIdxFolder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && !idxFile(path, "train-images-idx3-ubyte").empty();
}

std::string idxPrefix(Split split) { return split == Split::Train ? "train" : "t10k"; }

std::string requireIdxFile(const DataSource& source, const std::string& stem) {
  const std::string dir = folderOf(source), path = idxFile(dir, stem);
  if (path.empty()) {
    throw DataError(fmt::format("{}/{}{{.gz,}}: not found. Put the {} IDX files in {} or pass --data-dir (see "
                                "tools/get-data)", dir, stem, source.name, dir));
  }
  return path;
}

IdxArray idxLabels(const DataSource& source, Split split) {
  return readIdx(requireIdxFile(source, idxPrefix(split) + "-labels-idx1-ubyte"), 1);
}

// A folder of the user's: one more class than the largest label of either split (so that
// pstrain and pseval agree); a built-in dataset: its own.
int idxClasses(const DataSource& source) {
  if (const DatasetInfo* named = namedDataset(source.name)) return named->classes;
  int classes = 0;
  for (Split split : {Split::Train, Split::Test}) {
    const IdxArray labels = idxLabels(source, split);
    for (std::uint8_t label : labels.bytes) classes = std::max(classes, label + 1);
  }
  return std::max(classes, 1);
}

// Mean and standard deviation of a folder's training images (pixel / 255): both splits are
// normalised with the training split's.
std::pair<std::vector<double>, std::vector<double>> idxStatistics(const DataSource& source) {
  if (const DatasetInfo* named = namedDataset(source.name)) return {named->mean, named->std};
  const IdxArray images = readIdx(requireIdxFile(source, "train-images-idx3-ubyte"), 3);
  double sum = 0, squares = 0;
  for (std::uint8_t b : images.bytes) sum += b, squares += static_cast<double>(b) * b;
  const double n = std::max<double>(1, static_cast<double>(images.bytes.size()));
  const double mean = sum / n / 255, variance = squares / n / (255.0 * 255.0) - mean * mean;
  return {{mean}, {std::max(std::sqrt(std::max(variance, 0.0)), 1e-3)}};
}

DatasetInfo idxInfo(const DataSource& source) {
  if (const DatasetInfo* named = namedDataset(source.name)) return *named;
  const IdxArray images = readIdx(requireIdxFile(source, "train-images-idx3-ubyte"), 3);
  return {source.name, "a folder of IDX files", {1, images.dims[1], images.dims[2]}, idxClasses(source), "", "idx"};
}

Dataset loadIdx(const DataSource& source, Split split) {
  const std::string imagePath = requireIdxFile(source, idxPrefix(split) + "-images-idx3-ubyte");
  const std::string labelPath = requireIdxFile(source, idxPrefix(split) + "-labels-idx1-ubyte");
  IdxArray images = readIdx(imagePath, 3);
  IdxArray labels = readIdx(labelPath, 1);
  if (images.dims[0] != labels.dims[0]) {
    throw DataError(fmt::format("{} holds {} images but {} holds {} labels", imagePath, images.dims[0], labelPath,
                                labels.dims[0]));
  }
  const DatasetInfo info = idxInfo(source);
  if (images.dims[1] != info.shape[1] || images.dims[2] != info.shape[2]) {
    throw DataError(fmt::format("{}: images are {}x{}, expected {}x{}", imagePath, images.dims[1], images.dims[2],
                                info.shape[1], info.shape[2]));
  }
  for (std::size_t i = 0; i < labels.bytes.size(); ++i) {
    if (labels.bytes[i] >= info.classes) {
      throw DataError(fmt::format("{}: label {} of sample {} is not in 0..{}", labelPath, labels.bytes[i], i,
                                  info.classes - 1));
    }
  }
  auto samples = std::make_shared<TensorSamples>();
  const std::int64_t n = images.dims[0];
  samples->images = torch::from_blob(images.bytes.data(), {n, 1, images.dims[1], images.dims[2]}, torch::kUInt8).clone();
  samples->labels = torch::from_blob(labels.bytes.data(), {n}, torch::kUInt8).to(torch::kInt64);
  std::tie(samples->mean, samples->std) = idxStatistics(source);
  Dataset d;
  d.name = source.name;
  d.classes = info.classes;
  d.samples = std::move(samples);
  return d;
}

// --- CIFAR binary (CIFAR-10, CIFAR-100, or such a folder) ------------------------------------

const std::vector<double> kCifarMean = {0.4914, 0.4822, 0.4465};
const std::vector<double> kCifarStd = {0.2470, 0.2435, 0.2616};

// CIFAR-10's folder holds data_batch_1..5.bin and test_batch.bin; CIFAR-100's train.bin and
// test.bin (a token folder holds train.bin and val.bin).
int cifarClassesOfFolder(const std::string& dir) {
  if (isThere(fs::path(dir) / "data_batch_1.bin")) return 10;
  if (isThere(fs::path(dir) / "train.bin") && isThere(fs::path(dir) / "test.bin")) return 100;
  return 0;
}

bool isCifarFolder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && cifarClassesOfFolder(path) > 0;
}

int cifarClasses(const DataSource& source) {
  if (const DatasetInfo* named = namedDataset(source.name)) return named->classes;
  return cifarClassesOfFolder(source.name);
}

DatasetInfo cifarInfo(const DataSource& source) {
  if (const DatasetInfo* named = namedDataset(source.name)) return *named;
  const int classes = cifarClasses(source);
  return {source.name, fmt::format("a CIFAR-{} binary folder", classes), {3, 32, 32}, classes, "", "cifar"};
}

Dataset loadCifar(const DataSource& source, Split split) {
  const int classes = cifarClasses(source);
  const std::string dir = folderOf(source);
  std::vector<std::string> names;
  if (classes == 10) {
    if (split == Split::Train) {
      for (int i = 1; i <= 5; ++i) names.push_back(fmt::format("data_batch_{}.bin", i));
    } else {
      names.push_back("test_batch.bin");
    }
  } else {
    names.push_back(split == Split::Train ? "train.bin" : "test.bin");
  }
  std::vector<std::string> paths;
  for (const auto& file : names) {
    const fs::path path = fs::path(dir) / file;
    if (!isThere(path)) {
      throw DataError(fmt::format("{}: not found. Point --data-dir at the extracted {} binary folder "
                                  "(cifar-{}-{}-bin; see tools/get-data)",
                                  path.string(), source.name, classes, classes == 10 ? "batches" : "binary"));
    }
    paths.push_back(path.string());
  }
  CifarArrays arrays = readCifar(paths, classes);
  const auto n = static_cast<std::int64_t>(arrays.labels.size());
  auto samples = std::make_shared<TensorSamples>();
  samples->images = torch::from_blob(arrays.pixels.data(), {n, 3, 32, 32}, torch::kUInt8).clone();
  samples->labels = torch::from_blob(arrays.labels.data(), {n}, torch::kUInt8).to(torch::kInt64);
  samples->mean = kCifarMean;
  samples->std = kCifarStd;
  samples->augment = split == Split::Train;
  Dataset d;
  d.name = source.name;
  d.classes = classes;
  d.samples = std::move(samples);
  return d;
}

// --- synthetic -------------------------------------------------------------------------------

DatasetInfo syntheticInfo(const DataSource& source) { return *namedDataset(source.name); }

// Ten classes, each a fixed random template; a sample is its class template plus uniform
// noise. Identical on every machine (own integer generator), learnable in a few hundred
// steps, and hard enough that accuracy is not trivially 100%. The test set is a sixth of
// the training set, at least 100.
Dataset loadSynthetic(const DataSource& source, Split split) {
  const DatasetInfo& info = *namedDataset(source.name);
  const std::int64_t n =
      split == Split::Train ? source.syntheticSize : std::max<std::int64_t>(100, source.syntheticSize / 6);
  const std::int64_t pixels = info.shape[0] * info.shape[1] * info.shape[2];
  std::mt19937_64 templateGen(20240601);
  std::vector<std::uint8_t> templates(static_cast<std::size_t>(10 * pixels));
  for (auto& t : templates) t = static_cast<std::uint8_t>(templateGen() % 256);
  std::mt19937_64 gen(split == Split::Train ? 1 : 2);
  auto samples = std::make_shared<TensorSamples>();
  samples->images = torch::empty({n, info.shape[0], info.shape[1], info.shape[2]}, torch::kUInt8);
  samples->labels = torch::empty({n}, torch::kInt64);
  auto* out = samples->images.data_ptr<std::uint8_t>();
  auto* labels = samples->labels.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    const int label = static_cast<int>(gen() % 10);
    labels[i] = label;
    for (std::int64_t p = 0; p < pixels; ++p) {
      const int noise = static_cast<int>(gen() % 385) - 192;
      const int value = templates[static_cast<std::size_t>(label * pixels + p)] / 2 + 64 + noise;
      out[i * pixels + p] = static_cast<std::uint8_t>(std::clamp(value, 0, 255));
    }
  }
  samples->mean = info.mean;
  samples->std = info.std;
  samples->augment = info.shape[0] == 3 && split == Split::Train;
  Dataset d;
  d.name = info.name;
  d.classes = info.classes;
  d.samples = std::move(samples);
  return d;
}

std::vector<std::string> noFiles(const DataSource&) { return {}; }

// --- .npz ------------------------------------------------------------------------------------

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

// --- token files (nanoGPT, llm.c, NumPy .npy: TokenFile.h) -----------------------------------

// A token stream's windows: window k is the ids [k x stride, k x stride + L + 1), the first L
// the sample, the last L its targets. Read from the file for each batch (TokenFile: pread).
class TokenWindows : public Samples {
 public:
  TokenWindows(std::shared_ptr<const TokenFile> tokens, std::int64_t length, std::int64_t windows, std::int64_t stride)
      : tokens_(std::move(tokens)), length_(length), windows_(windows), stride_(stride) {}
  std::int64_t size() const override { return windows_; }
  std::pair<at::Tensor, at::Tensor> batch(const std::vector<std::int64_t>& indices, std::uint64_t) const override {
    const auto n = static_cast<std::int64_t>(indices.size());
    at::Tensor ids = torch::empty({n, length_ + 1}, torch::kInt64);
    for (std::int64_t i = 0; i < n; ++i) {
      const auto start = static_cast<std::uint64_t>(indices[static_cast<std::size_t>(i)] * stride_);
      tokens_->copy(start, static_cast<std::uint64_t>(length_ + 1), ids.data_ptr<std::int64_t>() + i * (length_ + 1));
    }
    return {ids.narrow(1, 0, length_).contiguous(), ids.narrow(1, 1, length_).contiguous()};
  }

 private:
  std::shared_ptr<const TokenFile> tokens_;
  std::int64_t length_, windows_, stride_;
};

// A token file's split: the train split's samples are the windows starting at every offset
// 0 .. ids - L - 1 (ShardSampler draws them); the test split's are W windows at k x stride,
// k < W: all the non-overlapping ones ((ids - 1) / L), or evalWindows of them spread evenly
// over the file, stride (ids - 1 - L) / (W - 1).
Dataset loadTokens(const DataSource& source, Split split) {
  const std::string path = split == Split::Train ? source.name : validationPath(source.name);
  auto tokens = std::make_shared<const TokenFile>(path);
  const auto count = static_cast<std::int64_t>(tokens->count()), length = source.blockSize;
  if (length <= 0) throw ConfigError(fmt::format("--dataset {} is a token file: give --block-size L", source.name));
  if (count < length + 1) {
    throw DataError(fmt::format("{}: {} tokens, too few for one window of --block-size {} and its targets (needs {}); "
                                "lower --block-size", path, count, length, length + 1));
  }
  Dataset d;
  d.name = source.name;
  d.ids = true;
  d.maxId = tokens->maxId();
  d.fileIdentity = tokens->identity();
  d.storedIds = tokens->idType();
  std::int64_t windows = 0, stride = 1;
  if (split == Split::Train) {
    windows = count - length;
    // The test split must take a window too: said now, not when pseval first reads it.
    std::string val;
    try {
      val = validationPath(source.name);
    } catch (const DataError&) {  // a name without "train": no test split to check
    }
    // Its ids too must fit the model's vocabulary (checked at start-up against maxId).
    if (!val.empty() && isThere(val)) d.maxId = std::max(d.maxId, loadTokens(source, Split::Test).maxId);
  } else {
    const std::int64_t all = (count - 1) / length;
    windows = source.evalWindows > 0 ? std::min(all, source.evalWindows) : all;
    stride = windows > 1 ? (count - 1 - length) / (windows - 1) : length;
  }
  d.samples = std::make_shared<TokenWindows>(std::move(tokens), length, windows, stride);
  d.classes = static_cast<int>(std::min<std::int64_t>(d.maxId + 1, std::numeric_limits<int>::max()));
  return d;
}

DatasetInfo tokenInfo(const DataSource& source) {
  throw ConfigError(fmt::format("--dataset {}: a token file's shape and vocabulary are known once it is read: it "
                                "takes a model of your own (--model FILE)", source.name));
}

// The token file and its test split beside it, where the name gives one.
std::vector<std::string> tokenFiles(const DataSource& source) {
  try {
    return {source.name, validationPath(source.name)};
  } catch (const DataError&) {
    return {source.name};
  }
}

bool isTokenFile(const std::string& path) { return config::isTokenFile(path); }

}  // namespace

// clang-format off
const std::vector<FormatRow>& formats() {
  static const std::vector<FormatRow> table = {
    {"idx", "a folder of IDX files (train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-..., gzipped or not)",
     Yields::Labelled, isIdxFolder, idxInfo, loadIdx, filesUnder},
    {"cifar", "a CIFAR binary folder (CIFAR-10's data_batch_1..5.bin, test_batch.bin; CIFAR-100's train.bin, test.bin)",
     Yields::Labelled, isCifarFolder, cifarInfo, loadCifar, filesUnder},
    {"npz", "a NumPy .npz file (x_train, y_train, x_test, y_test)", Yields::Labelled, isNpz, npzInfo, loadNpz,
     theFileItself},
    {"tokens", "a token file (nanoGPT's or llm.c's .bin, NumPy's .npy of uint16 or uint32 ids)", Yields::TokenStream,
     isTokenFile, tokenInfo, loadTokens, tokenFiles},
    {"synthetic", "", Yields::Labelled, nullptr, syntheticInfo, loadSynthetic, noFiles},
  };
  return table;
}
// clang-format on

const FormatRow& formatOf(const std::string& name) {
  const DatasetInfo* named = namedDataset(name);
  for (const FormatRow& row : formats()) {
    if (named ? named->format == row.name : row.recognises && row.recognises(name)) return row;
  }
  if (named) throw InternalError(fmt::format("dataset '{}' names format '{}', which has no row", name, named->format));
  std::string names, paths;
  for (const DatasetInfo& info : datasetList()) names += (names.empty() ? "" : ", ") + info.name;
  for (const FormatRow& row : formats()) {
    if (row.recognises) paths += fmt::format("\n  {}", row.reads);
  }
  std::error_code ec;
  const std::string what = fs::is_directory(name, ec) ? fmt::format("{}: a folder that holds no format's files", name)
                           : fs::exists(name, ec)     ? fmt::format("{}: a file that no format reads", name)
                                                      : fmt::format("unknown dataset '{}'", name);
  throw ConfigError(fmt::format("{}: give a built-in name ({}; --list-datasets) or the path of{}", what, names, paths));
}

}  // namespace pstrain::data
