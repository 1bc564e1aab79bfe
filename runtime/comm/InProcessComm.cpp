#include "runtime/comm/InProcessComm.h"

#include <fmt/format.h>

#include <chrono>
#include <cstring>

#include "runtime/Errors.h"

namespace pstrain::comm {

class InProcessComm : public Communicator {
 public:
  InProcessComm(InProcessWorld& world, int rank) : world_(world), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return world_.size(); }
  std::string hostName() const override { return "thread"; }

  void broadcast(void* data, std::size_t bytes, int root, const std::string& context) override {
    world_.arrive(rank_, data, "broadcast at " + context, timeoutSeconds());
    if (rank_ != root) std::memcpy(data, world_.slot(root), bytes);
    world_.arrive(rank_, data, "broadcast at " + context, timeoutSeconds());
  }

  void reduceSum(float* data, std::size_t count, int root, const std::string& context) override {
    world_.arrive(rank_, data, "reduce at " + context, timeoutSeconds());
    if (rank_ == root) {
      for (int r = 0; r < size(); ++r) {
        if (r == root) continue;
        const float* other = static_cast<const float*>(world_.slot(r));
        for (std::size_t i = 0; i < count; ++i) data[i] += other[i];
      }
    }
    world_.arrive(rank_, data, "reduce at " + context, timeoutSeconds());
  }

  std::vector<std::string> allGather(const std::string& mine, const std::string& context) override {
    std::string copy = mine;
    world_.arrive(rank_, &copy, "allgather at " + context, timeoutSeconds());
    std::vector<std::string> all;
    for (int r = 0; r < size(); ++r) all.push_back(*static_cast<std::string*>(world_.slot(r)));
    world_.arrive(rank_, &copy, "allgather at " + context, timeoutSeconds());
    return all;
  }

 private:
  InProcessWorld& world_;
  int rank_;
};

InProcessWorld::InProcessWorld(int size) : slots_(size, nullptr) {
  for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<InProcessComm>(*this, r));
}

InProcessWorld::~InProcessWorld() = default;

Communicator& InProcessWorld::rank(int r) { return *ranks_.at(r); }

int InProcessWorld::size() const { return static_cast<int>(slots_.size()); }

void InProcessWorld::abort() {
  std::lock_guard<std::mutex> lock(mutex_);
  aborted_ = true;
  changed_.notify_all();
}

void InProcessWorld::arrive(int rank, void* ptr, const std::string& what, double timeoutSeconds) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (aborted_) throw CommError(fmt::format("{}: another rank failed", what));
  slots_[rank] = ptr;
  long myGeneration = generation_;
  if (++arrived_ == size()) {
    arrived_ = 0;
    ++generation_;
    changed_.notify_all();
    return;
  }
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(timeoutSeconds));
  bool done = changed_.wait_until(lock, deadline,
                                  [&] { return generation_ != myGeneration || aborted_; });
  if (generation_ != myGeneration) return;  // completed, even if a rank failed right after
  if (aborted_) throw CommError(fmt::format("{}: another rank failed", what));
  if (!done) {
    throw CommError(fmt::format("{}: no answer from the other ranks within {} s", what, timeoutSeconds));
  }
}

}  // namespace pstrain::comm
