#pragma once
// The transport seen by the roles: a handful of collectives over raw buffers. No <mpi.h>
// and no torch here; comm/mpi/ implements it over Open MPI, InProcessComm over threads.
//
// Contract shared by all implementations:
// * Collectives are called by every rank of the communicator in the same order.
// * Every wait is bounded by timeoutSeconds(); on expiry a CommError names the operation
//   and the `context` the caller gave (for example "reduce at step 120"); the launcher
//   adds the rank when it prints it.
// * Waiting does not spin a core: implementations poll with back-off.
// * A Communicator is used by one thread at a time.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace pstrain::comm {

// `count` floats of every rank that any other rank can read without the owner taking part
// (MPI one-sided communication, passive target). Made collectively by exposeWindow().
class Window {
 public:
  virtual ~Window() = default;
  std::size_t count() const { return count_; }

  // Replaces this rank's floats with count() floats from `data`, atomically for readers.
  virtual void publish(const float* data) = 0;

  // Copies `peer`'s floats into `out` (count() floats) as last published; bounded by the
  // communicator's timeout.
  virtual void read(int peer, float* out, const std::string& context) = 0;

  // Collective: every rank closes its window together; after it no rank reads any more.
  // A window that is destroyed without close() (an error is unwinding) is abandoned, not
  // waited for: the launcher ends the job.
  virtual void close(const std::string& context) = 0;

 protected:
  explicit Window(std::size_t count) : count_(count) {}

 private:
  std::size_t count_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Copies `bytes` bytes at `data` from `root` to every rank.
  virtual void broadcast(void* data, std::size_t bytes, int root, const std::string& context) = 0;

  // Element-wise sum of the other ranks' `count` floats into `data` on `root`: every rank
  // but the root contributes its `data`, and the root's `data` is overwritten with the sum
  // (a parameter server has no gradient of its own). On other ranks `data` is left
  // unspecified.
  virtual void reduceSum(float* data, std::size_t count, int root, const std::string& context) = 0;

  // reduceSum and broadcast without waiting: each starts the operation and returns a
  // request that wait() completes. Every rank starts the same collectives in the same
  // order; the caller leaves `data` alone until the wait. Requests are valid
  // until every request started so far has been waited for.
  virtual std::size_t startReduceSum(float* data, std::size_t count, int root, const std::string& context) = 0;
  virtual std::size_t startBroadcast(void* data, std::size_t bytes, int root, const std::string& context) = 0;
  virtual void wait(std::size_t request) = 0;
  // Lets started operations advance while the caller computes (MPI moves data only inside
  // its calls); cheap, never blocks.
  virtual void progress() {}
  // A hint for this rank's next wait (whatever it completes): its data are posted only
  // after the peers compute, as a step's first gradients reach the server, so nothing can
  // be on the way before a peer posts, and the wait may sleep long between polls until
  // then (MpiComm: up to 16 ms instead of 2, while its doorbell is trusted). The hint ends
  // with that wait.
  virtual void expectLongWait() {}

  // Element-wise sum of every rank's `count` floats, into `data` on every rank.
  virtual void allReduceSum(float* data, std::size_t count, const std::string& context) = 0;

  // Every rank's `mine`, indexed by rank, on every rank (used for start-up checks).
  virtual std::vector<std::string> allGather(const std::string& mine,
                                             const std::string& context) = 0;

  // Every rank's `mine`, indexed by rank, on `root` (sizes may differ); empty elsewhere.
  virtual std::vector<std::string> gather(const std::string& mine, int root,
                                          const std::string& context) = 0;

  // Returns when every rank has called it.
  virtual void barrier(const std::string& context) = 0;

  // Point to point. Messages from one rank to another arrive in the order they were sent.
  // send() returns when `data` may be reused (the receiver may not have it yet).
  virtual void send(const void* data, std::size_t bytes, int dest, const std::string& context) = 0;

  static constexpr int kAnySource = -1;
  struct Received {
    int source = -1;
    std::size_t bytes = 0;
  };
  // Receives the next message from `source` (kAnySource: whichever rank's arrives first)
  // into `data`, which has room for `capacity` bytes; a longer message is a CommError.
  virtual Received receive(void* data, std::size_t capacity, int source, const std::string& context) = 0;

  // Point to point without waiting, on a channel `tag` of their own (>= kFirstFreeTag; the
  // blocking send() and receive() above use another): startSend() posts `bytes` at `data`
  // to `dest`, startReceive() a receive from `source` of at most `capacity` bytes into
  // `data`, whose size it writes to *received once the message is in. Messages on one tag
  // from one rank to another arrive in the order they were sent. Each returns a request for
  // wait() or test(); the caller leaves the buffer alone until then.
  static constexpr int kFirstFreeTag = 2;
  virtual std::size_t startSend(const void* data, std::size_t bytes, int dest, int tag, const std::string& context) = 0;
  virtual std::size_t startReceive(void* data, std::size_t capacity, int source, int tag, std::size_t* received,
                                   const std::string& context) = 0;
  // Whether `request` (of any start*()) has completed, without waiting; once true, the
  // request counts as waited for.
  virtual bool test(std::size_t request) = 0;

  // Collective: a Window of `count` floats on every rank, initially zero.
  virtual std::unique_ptr<Window> exposeWindow(std::size_t count, const std::string& context) = 0;

  // Human-readable name of the host this rank runs on.
  virtual std::string hostName() const = 0;

  void setTimeoutSeconds(double seconds) { timeoutSeconds_ = seconds; }
  double timeoutSeconds() const { return timeoutSeconds_; }
  // A wait that lasts this long (capped by the timeout; 0: never) prints which ranks have
  // not arrived (Stall.h), and again every interval; the timeout's error names them too.
  // Where the implementation supports it (MpiComm).
  void setStallWarningSeconds(double seconds) { stallWarningSeconds_ = seconds; }
  double stallWarningSeconds() const { return stallWarningSeconds_; }

 private:
  double timeoutSeconds_ = 300;
  double stallWarningSeconds_ = 60;
};

}  // namespace pstrain::comm
