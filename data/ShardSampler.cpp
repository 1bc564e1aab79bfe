#include "data/ShardSampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "runtime/Errors.h"

namespace pstrain::data {
namespace {

// Uniform integer in [0, bound) by rejection, independent of the standard library's
// (implementation-defined) distributions.
std::uint64_t uniformBelow(std::mt19937_64& gen, std::uint64_t bound) {
  const std::uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  std::uint64_t x;
  do {
    x = gen();
  } while (x >= limit);
  return x % bound;
}

constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;

std::uint64_t mix64(std::uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

std::int64_t windowDraw(std::uint64_t seed, std::int64_t step, int shard, std::int64_t j, std::int64_t offsets) {
  std::uint64_t h = mix64(seed + kGolden);
  h = mix64(h ^ (static_cast<std::uint64_t>(step) + kGolden));
  h = mix64(h ^ (static_cast<std::uint64_t>(shard) + kGolden));
  h = mix64(h ^ (static_cast<std::uint64_t>(j) + kGolden));
  return static_cast<std::int64_t>(h % static_cast<std::uint64_t>(offsets));
}

std::vector<int> virtualShardsOf(int worker, int workers, int shards) {
  if (workers <= 0 || worker < 0 || worker >= workers || workers > shards) {
    throw ConfigError(fmt::format("{} workers cannot share {} virtual shards (--virtual-shards): at most as many "
                                  "workers as shards", workers, shards));
  }
  std::vector<int> mine;
  const auto first = static_cast<std::int64_t>(worker) * shards / workers;
  const auto last = static_cast<std::int64_t>(worker + 1) * shards / workers;
  for (auto v = first; v < last; ++v) mine.push_back(static_cast<int>(v));
  return mine;
}

ShardSampler::ShardSampler(std::int64_t datasetSize, int shards, std::int64_t batchSize,
                           std::uint64_t seed, std::int64_t windowLength)
    : size_(datasetSize), windowLength_(windowLength), shards_(shards), batchSize_(batchSize), seed_(seed) {
  if (datasetSize <= 0 || shards <= 0 || batchSize <= 0 || windowLength < 0) {
    throw ConfigError(fmt::format("cannot shard {} samples over {} workers in batches of {}",
                                  datasetSize, shards, batchSize));
  }
  if (windowLength_ > 0) {
    const std::int64_t windowsPerEpoch = (size_ + windowLength_) / windowLength_;  // the tokens / L
    shardSize_ = std::max<std::int64_t>(1, windowsPerEpoch / shards_);
    stepsPerEpoch_ = std::max<std::int64_t>(1, windowsPerEpoch / (static_cast<std::int64_t>(shards_) * batchSize_));
    return;
  }
  shardSize_ = (size_ + shards_ - 1) / shards_;
  stepsPerEpoch_ = (shardSize_ + batchSize_ - 1) / batchSize_;
}

std::vector<std::int64_t> ShardSampler::permutation(std::int64_t epoch) const {
  std::vector<std::int64_t> order(size_);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 gen(seed_ * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(epoch));
  for (std::int64_t i = size_ - 1; i > 0; --i) {
    std::swap(order[i], order[uniformBelow(gen, static_cast<std::uint64_t>(i) + 1)]);
  }
  return order;
}

std::int64_t ShardSampler::batchSizeAt(std::int64_t step) const {
  if (windowLength_ > 0) return batchSize_;
  const std::int64_t first = (step % stepsPerEpoch_) * batchSize_;
  return std::min(batchSize_, shardSize_ - first);
}

std::vector<std::int64_t> ShardSampler::batch(int shard, std::int64_t step) const {
  if (shard < 0 || shard >= shards_) throw ConfigError(fmt::format("no shard {}", shard));
  if (windowLength_ > 0) {
    std::vector<std::int64_t> offsets(static_cast<std::size_t>(batchSize_));
    for (std::int64_t j = 0; j < batchSize_; ++j) offsets[j] = windowDraw(seed_, step, shard, j, size_);
    return offsets;
  }
  std::int64_t epoch = epochOf(step);
  if (epoch != cachedEpoch_) {
    cached_ = permutation(epoch);
    cachedEpoch_ = epoch;
  }
  const std::int64_t first = (step % stepsPerEpoch_) * batchSize_;
  const std::int64_t last = first + batchSizeAt(step);
  std::vector<std::int64_t> indices;
  indices.reserve(last - first);
  for (std::int64_t k = first; k < last; ++k) {
    indices.push_back(cached_[(shard + k * shards_) % size_]);
  }
  return indices;
}

}  // namespace pstrain::data
