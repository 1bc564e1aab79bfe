#include "runtime/comm/InProcessComm.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <shared_mutex>

#include "runtime/Errors.h"
#include "runtime/metrics/Clock.h"

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
      std::fill(data, data + count, 0.0f);
      for (int r = 0; r < size(); ++r) {
        if (r == root) continue;
        const float* other = static_cast<const float*>(world_.slot(r));
        for (std::size_t i = 0; i < count; ++i) data[i] += other[i];
      }
    }
    world_.arrive(rank_, data, "reduce at " + context, timeoutSeconds());
  }

  // Threads run in lockstep anyway: the collective completes at once.
  std::size_t startReduceSum(float* data, std::size_t count, int root, const std::string& context) override {
    reduceSum(data, count, root, context);
    return started({});
  }
  std::size_t startBroadcast(void* data, std::size_t bytes, int root, const std::string& context) override {
    broadcast(data, bytes, root, context);
    return started({});
  }
  void wait(std::size_t request) override {
    Pending& p = pending_.at(request);
    if (p.done) return;
    std::unique_lock<std::mutex> lock(world_.mutex_);
    world_.waitUntil(lock, [&] { return take(p); }, "receive at " + p.context, timeoutSeconds());
  }
  bool test(std::size_t request) override {
    Pending& p = pending_.at(request);
    if (p.done) return true;
    std::lock_guard<std::mutex> lock(world_.mutex_);
    return take(p);
  }
  // A send is done at once: the message is copied into the receiver's mailbox.
  std::size_t startSend(const void* data, std::size_t bytes, int dest, int tag, const std::string& context) override {
    post(data, bytes, dest, tag);
    return started({});
  }
  std::size_t startReceive(void* data, std::size_t capacity, int source, int tag, std::size_t* received,
                           const std::string& context) override {
    return started({data, capacity, source, tag, received, context, false});
  }

  void allReduceSum(float* data, std::size_t count, const std::string& context) override {
    world_.arrive(rank_, data, "allreduce at " + context, timeoutSeconds());
    std::vector<float> sum(count, 0.0f);
    for (int r = 0; r < size(); ++r) {  // every rank adds in rank order: equal sums everywhere
      const float* other = static_cast<const float*>(world_.slot(r));
      for (std::size_t i = 0; i < count; ++i) sum[i] += other[i];
    }
    world_.arrive(rank_, data, "allreduce at " + context, timeoutSeconds());
    std::memcpy(data, sum.data(), count * sizeof(float));
  }

  std::vector<std::string> gather(const std::string& mine, int root, const std::string& context) override {
    auto all = allGather(mine, "gather at " + context);
    if (rank_ != root) all.clear();
    return all;
  }

  void barrier(const std::string& context) override {
    world_.arrive(rank_, nullptr, "barrier at " + context, timeoutSeconds());
  }

  void send(const void* data, std::size_t bytes, int dest, const std::string& context) override {
    post(data, bytes, dest, kBlockingTag);
  }

  Received receive(void* data, std::size_t capacity, int source, const std::string& context) override {
    std::unique_lock<std::mutex> lock(world_.mutex_);
    auto& box = world_.mailboxes_[rank_];
    auto match = [&] {
      return std::find_if(box.begin(), box.end(), [&](const auto& m) {
        return m.tag == kBlockingTag && (source == kAnySource || m.source == source);
      });
    };
    world_.waitUntil(lock, [&] { return match() != box.end(); }, "receive at " + context, timeoutSeconds());
    auto it = match();
    if (it->bytes.size() > capacity) {
      throw CommError(fmt::format("receive at {}: a message of {} bytes from rank {}, expected at most {}", context,
                                  it->bytes.size(), it->source, capacity));
    }
    Received got{it->source, it->bytes.size()};
    std::memcpy(data, it->bytes.data(), got.bytes);
    box.erase(it);
    return got;
  }

  std::unique_ptr<Window> exposeWindow(std::size_t count, const std::string& context) override;

  std::vector<std::string> allGather(const std::string& mine, const std::string& context) override {
    std::string copy = mine;
    world_.arrive(rank_, &copy, "allgather at " + context, timeoutSeconds());
    std::vector<std::string> all;
    for (int r = 0; r < size(); ++r) all.push_back(*static_cast<std::string*>(world_.slot(r)));
    world_.arrive(rank_, &copy, "allgather at " + context, timeoutSeconds());
    return all;
  }

 private:
  static constexpr int kBlockingTag = 0;  // send() and receive()

  void post(const void* data, std::size_t bytes, int dest, int tag) {
    std::lock_guard<std::mutex> lock(world_.mutex_);
    world_.mailboxes_.at(dest).push_back({rank_, tag, std::string(static_cast<const char*>(data), bytes)});
    world_.changed_.notify_all();
  }

  // A request: a started receive until its message is taken, else done from the start.
  struct Pending {
    void* data = nullptr;
    std::size_t capacity = 0;
    int source = 0, tag = 0;
    std::size_t* received = nullptr;
    std::string context;
    bool done = true;
  };
  std::size_t started(Pending pending) {
    pending_.push_back(std::move(pending));
    return pending_.size() - 1;
  }
  // Takes the receive's message if it is there (world_.mutex_ held); true once it is taken.
  bool take(Pending& p) {
    if (p.done) return true;
    auto& box = world_.mailboxes_[rank_];
    const auto it = std::find_if(box.begin(), box.end(), [&](const auto& m) { return m.tag == p.tag && m.source == p.source; });
    if (it == box.end()) return false;
    if (it->bytes.size() > p.capacity) {
      throw CommError(fmt::format("receive at {}: a message of {} bytes from rank {}, expected at most {}", p.context,
                                  it->bytes.size(), it->source, p.capacity));
    }
    std::memcpy(p.data, it->bytes.data(), it->bytes.size());
    if (p.received) *p.received = it->bytes.size();
    box.erase(it);
    p.done = true;
    return true;
  }
  std::vector<Pending> pending_;  // by request (never reused: a test run is short)
  InProcessWorld& world_;
  int rank_;
};

// Each rank's floats behind a reader/writer lock; peers read them directly.
class InProcessWindow : public Window {
 public:
  InProcessWindow(InProcessComm& comm, std::size_t count) : Window(count), comm_(comm), values_(count, 0.0f) {}

  void publish(const float* data) override {
    std::unique_lock<std::shared_mutex> lock(mutex_);
    std::memcpy(values_.data(), data, count() * sizeof(float));
  }

  void read(int peer, float* out, const std::string& context) override {
    InProcessWindow& other = *peers_.at(peer);
    std::shared_lock<std::shared_mutex> lock(other.mutex_);
    std::memcpy(out, other.values_.data(), count() * sizeof(float));
  }

  void close(const std::string& context) override { comm_.barrier("closing the window at " + context); }

  std::vector<InProcessWindow*> peers_;

 private:
  InProcessComm& comm_;
  std::shared_mutex mutex_;
  std::vector<float> values_;
};

std::unique_ptr<Window> InProcessComm::exposeWindow(std::size_t count, const std::string& context) {
  auto window = std::make_unique<InProcessWindow>(*this, count);
  world_.arrive(rank_, window.get(), "window at " + context, timeoutSeconds());
  for (int r = 0; r < size(); ++r) window->peers_.push_back(static_cast<InProcessWindow*>(world_.slot(r)));
  world_.arrive(rank_, window.get(), "window at " + context, timeoutSeconds());
  return window;
}

InProcessWorld::InProcessWorld(int size) : mailboxes_(size), slots_(size, nullptr) {
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
  waitUntil(lock, [&] { return generation_ != myGeneration; }, what, timeoutSeconds);
}

template <typename Ready>
void InProcessWorld::waitUntil(std::unique_lock<std::mutex>& lock, Ready ready, const std::string& what,
                               double timeoutSeconds) {
  auto deadline = metrics::Clock::now() + metrics::toDuration(timeoutSeconds);
  bool done = changed_.wait_until(lock, deadline, [&] { return ready() || aborted_; });
  if (ready()) return;  // completed, even if a rank failed right after
  if (aborted_) throw CommError(fmt::format("{}: another rank failed", what));
  if (!done) {
    throw CommError(fmt::format("{}: no answer from the other ranks within {} s", what, timeoutSeconds));
  }
}

}  // namespace pstrain::comm
