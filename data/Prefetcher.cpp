#include "data/Prefetcher.h"

#include <chrono>

namespace pstrain::data {

Prefetcher::Batch Prefetcher::take(std::int64_t step, double* waitedSeconds) {
  const auto start = std::chrono::steady_clock::now();
  Batch batch;
  if (next_.valid() && nextStep_ == step) {
    batch = next_.get();
  } else {
    if (next_.valid()) next_.wait();  // a stale prefetch (the step jumped): drop it
    batch = make_(step);
  }
  if (waitedSeconds) *waitedSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  nextStep_ = step + 1;
  next_ = std::async(std::launch::async, make_, nextStep_);
  return batch;
}

}  // namespace pstrain::data
