#pragma once
// Prepares the micro-batches of the next step on a background thread while the current
// step computes, so a step waits for data only when preparing is slower than computing.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <future>
#include <utility>
#include <vector>

namespace pstrain::data {

class Prefetcher {
 public:
  using Batch = std::pair<at::Tensor, at::Tensor>;
  using Batches = std::vector<Batch>;  // a step's micro-batches, one per virtual shard
  // `make(step, shards)` builds the micro-batches of `step` for virtual shards `shards`; it
  // runs on the background thread and must not touch state that the caller changes
  // meanwhile.
  using Make = std::function<Batches(std::int64_t step, const std::vector<int>& shards)>;
  explicit Prefetcher(Make make) : make_(std::move(make)) {}

  // The micro-batches of `step` for `shards`: the prefetched ones if they are those
  // (waiting for them to be finished), else built now. Then starts building step + 1 for
  // the same shards. `waitedSeconds` receives the time this call blocked. Exceptions of
  // `make` surface here.
  Batches take(std::int64_t step, const std::vector<int>& shards, double* waitedSeconds);

 private:
  Make make_;
  std::future<Batches> next_;
  std::int64_t nextStep_ = -1;
  std::vector<int> nextShards_;
};

}  // namespace pstrain::data
