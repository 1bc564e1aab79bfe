#pragma once
// Prepares the batch of the next step on a background thread while the current step
// computes, so a step waits for data only when preparing is slower than computing.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <future>
#include <utility>

namespace pstrain::data {

class Prefetcher {
 public:
  using Batch = std::pair<at::Tensor, at::Tensor>;
  // `make(step)` builds the batch of `step`; it runs on the background thread and must not
  // touch state that the caller changes meanwhile.
  explicit Prefetcher(std::function<Batch(std::int64_t)> make) : make_(std::move(make)) {}

  // The batch of `step`: the prefetched one if it is that step's (waiting for it to be
  // finished), else built now. Then starts building step + 1. `waitedSeconds` receives the
  // time this call blocked. Exceptions of `make` surface here.
  Batch take(std::int64_t step, double* waitedSeconds);

 private:
  std::function<Batch(std::int64_t)> make_;
  std::future<Batch> next_;
  std::int64_t nextStep_ = -1;
};

}  // namespace pstrain::data
