#pragma once
// Ranks as threads: an in-process Communicator for multi-rank tests (the gloo pattern).
// Create one InProcessWorld of N ranks, hand world.rank(r) to the thread playing rank r.
// If any rank throws, call world.abort() so the others leave their waits with a CommError
// instead of timing out.
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/comm/Communicator.h"

namespace pstrain::comm {

class InProcessWorld {
 public:
  explicit InProcessWorld(int size);
  ~InProcessWorld();

  Communicator& rank(int r);
  int size() const;
  // Wakes every waiting rank with a CommError; later collectives fail at once.
  void abort();

 private:
  friend class InProcessComm;
  // One rendezvous: every rank deposits a pointer, waits until all have, and (for the
  // second phase) until all are done reading before anyone reuses its buffer.
  void arrive(int rank, void* ptr, const std::string& what, double timeoutSeconds);
  void* slot(int rank) const { return slots_[rank]; }
  // Waits (bounded, abortable) until `ready()` holds; call with `lock` held on mutex_.
  template <typename Ready>
  void waitUntil(std::unique_lock<std::mutex>& lock, Ready ready, const std::string& what, double timeoutSeconds);

  struct Message {
    int source;
    int tag;
    std::string bytes;
  };
  std::vector<std::deque<Message>> mailboxes_;  // by destination rank

  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<void*> slots_;
  int arrived_ = 0;
  long generation_ = 0;
  bool aborted_ = false;
  std::vector<std::unique_ptr<Communicator>> ranks_;
};

}  // namespace pstrain::comm
