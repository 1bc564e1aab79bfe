#include "runtime/roles/Balance.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "data/ShardSampler.h"

namespace pstrain::roles {
namespace {

constexpr double kSmoothing = 0.3;  // weight of the newest measurement
constexpr double kWorthIt = 0.95;   // new counts only if the predicted step time drops by 5%

// The predicted time of a step: the slowest worker's.
double stepSeconds(const std::vector<int>& counts, const std::vector<double>& secondsPerShard) {
  double slowest = 0;
  for (std::size_t w = 0; w < counts.size(); ++w) slowest = std::max(slowest, counts[w] * secondsPerShard[w]);
  return slowest;
}

}  // namespace

ShareBalancer::ShareBalancer(int firstWorker, int workers, int shards, bool enabled, int rebalanceEvery)
    : firstWorker_(firstWorker),
      shards_(shards),
      enabled_(enabled),
      secondsPerShard_(static_cast<std::size_t>(workers), 0.0),
      rebalanceEvery_(rebalanceEvery) {
  for (int w = 0; w < workers; ++w) counts_.push_back(static_cast<int>(data::virtualShardsOf(w, workers, shards).size()));
}

void ShareBalancer::record(const float* computeSeconds) {
  if (!enabled_) return;
  for (std::size_t w = 0; w < counts_.size(); ++w) {
    const double perShard = computeSeconds[firstWorker_ + w] / std::max(1, counts_[w]);
    if (!(std::isfinite(perShard) && perShard > 0)) continue;
    double& s = secondsPerShard_[w];
    s = s == 0 ? perShard : (1 - kSmoothing) * s + kSmoothing * perShard;
  }
  if (++steps_ % rebalanceEvery_ != 0) return;
  if (std::any_of(secondsPerShard_.begin(), secondsPerShard_.end(), [](double s) { return s == 0; })) return;
  std::vector<double> speed;
  for (double s : secondsPerShard_) speed.push_back(1 / s);
  auto proposed = proportional(speed, shards_);
  if (stepSeconds(proposed, secondsPerShard_) < kWorthIt * stepSeconds(counts_, secondsPerShard_)) counts_ = proposed;
}

void ShareBalancer::write(float* shares) const {
  std::fill_n(shares, firstWorker_, 0.0f);
  for (std::size_t w = 0; w < counts_.size(); ++w) shares[firstWorker_ + w] = static_cast<float>(counts_[w]);
}

std::vector<int> ShareBalancer::proportional(const std::vector<double>& speed, int shards) {
  // One each, then every further shard to the worker that would finish it soonest: the
  // step's time (the slowest worker's) is as short as whole shards allow.
  std::vector<int> counts(speed.size(), 1);
  for (int given = static_cast<int>(speed.size()); given < shards; ++given) {
    std::size_t best = 0;
    for (std::size_t w = 1; w < speed.size(); ++w) {
      if ((counts[w] + 1) / speed[w] < (counts[best] + 1) / speed[best]) best = w;
    }
    ++counts[best];
  }
  return counts;
}

std::vector<int> shardsOfRank(const float* shares, int ranks, int rank) {
  int first = 0;
  for (int r = 0; r < rank && r < ranks; ++r) first += static_cast<int>(shares[r]);
  std::vector<int> mine(static_cast<std::size_t>(std::max(0.0f, shares[rank])));
  std::iota(mine.begin(), mine.end(), first);
  return mine;
}

}  // namespace pstrain::roles
