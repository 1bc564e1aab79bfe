#include "data/Prefetcher.h"

#include <chrono>

namespace pstrain::data {

Prefetcher::Batches Prefetcher::take(std::int64_t step, const std::vector<int>& shards, double* waitedSeconds) {
  const auto start = std::chrono::steady_clock::now();
  Batches batches;
  if (next_.valid() && nextStep_ == step && nextShards_ == shards) {
    batches = next_.get();
  } else {
    if (next_.valid()) next_.wait();  // a stale prefetch (the step jumped, the shards changed): drop it
    batches = make_(step, shards);
  }
  if (waitedSeconds) *waitedSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  nextStep_ = step + 1;
  nextShards_ = shards;
  next_ = std::async(std::launch::async, make_, nextStep_, nextShards_);
  return batches;
}

}  // namespace pstrain::data
