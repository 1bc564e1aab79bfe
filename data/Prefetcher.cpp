#include "data/Prefetcher.h"

#include "runtime/metrics/Clock.h"

namespace pstrain::data {

Prefetcher::Batches Prefetcher::take(std::int64_t step, const std::vector<int>& shards, double* waitedSeconds) {
  const auto start = metrics::Clock::now();
  Batches batches;
  if (next_.valid() && nextStep_ == step && nextShards_ == shards) {
    batches = next_.get();
  } else {
    if (next_.valid()) next_.wait();  // a stale prefetch (the step jumped, the shards changed): drop it
    batches = make_(step, shards);
  }
  if (waitedSeconds) *waitedSeconds = metrics::secondsSince(start);
  nextStep_ = step + 1;
  nextShards_ = shards;
  next_ = std::async(std::launch::async, make_, nextStep_, nextShards_);
  return batches;
}

}  // namespace pstrain::data
