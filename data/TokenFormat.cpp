// The format row "tokens" (Formats.h): token files (nanoGPT, llm.c, NumPy .npy): TokenFile.h reads them.
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

#include "data/TokenFile.h"
#include "data/FormatParts.h"
#include "runtime/Errors.h"
#include "runtime/Text.h"
#include "runtime/config/TrainConfig.h"

namespace pstrain::data {
namespace {

namespace fs = std::filesystem;

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

const FormatRow kTokenFormat = {"tokens",
    "a token file (nanoGPT's or llm.c's .bin, NumPy's .npy of uint16 or uint32 ids)",
    Yields::TokenStream, isTokenFile, tokenInfo, loadTokens, tokenFiles};

}  // namespace pstrain::data
