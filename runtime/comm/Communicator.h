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
#include <string>
#include <vector>

namespace pstrain::comm {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Copies `bytes` bytes at `data` from `root` to every rank.
  virtual void broadcast(void* data, std::size_t bytes, int root, const std::string& context) = 0;

  // Element-wise sum of every rank's `count` floats into `data` on `root`. Every rank
  // contributes its `data`; on other ranks `data` is left unspecified.
  virtual void reduceSum(float* data, std::size_t count, int root, const std::string& context) = 0;

  // Every rank's `mine`, indexed by rank, on every rank (used for start-up checks).
  virtual std::vector<std::string> allGather(const std::string& mine,
                                             const std::string& context) = 0;

  // Human-readable name of the host this rank runs on.
  virtual std::string hostName() const = 0;

  void setTimeoutSeconds(double seconds) { timeoutSeconds_ = seconds; }
  double timeoutSeconds() const { return timeoutSeconds_; }

 private:
  double timeoutSeconds_ = 300;
};

}  // namespace pstrain::comm
