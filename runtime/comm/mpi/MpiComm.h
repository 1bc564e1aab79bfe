#pragma once
// The Open MPI Communicator over MPI_COMM_WORLD. The only header whose implementation
// includes <mpi.h>. Collectives are non-blocking MPI calls completed by polling MPI_Test
// with exponential back-off (up to 2 ms of sleep; 16 ms in a wait announced by
// expectLongWait()), so a waiting rank uses almost no CPU and every wait is bounded by
// timeoutSeconds(). A rank that posts what others wait for rings their Doorbell, which ends
// their sleep at once, once connect() has run. Each rank tells the others, once per step, the
// step it waits in (currentStep(); tag 1, 8 bytes, never waited for), so that a wait longer
// than stallWarningSeconds() names who has not arrived (Stall.h).
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/Communicator.h"
#include "runtime/comm/Doorbell.h"

namespace pstrain::comm::mpi {

class MpiComm : public Communicator {
 public:
  // MPI must already be initialised (see MpiSession) and outlive this object. Not collective.
  MpiComm();
  ~MpiComm() override;

  // Collective: the ranks learn each other's host names (for stall warnings), and every
  // rank makes its doorbell (none if `doorbell` is false: --doorbell off), on the interfaces
  // Open MPI's TCP transport uses (its btl_tcp_if_include/exclude), rank 0 draws the job's
  // random token, the ranks exchange addresses and ring each other once. Until then waits
  // sleep their whole pauses and stall warnings name ranks without their hosts.
  void connect(bool doorbell);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string hostName() const override { return host_; }

  void broadcast(void* data, std::size_t bytes, int root, const std::string& context) override;
  void reduceSum(float* data, std::size_t count, int root, const std::string& context) override;
  std::size_t startReduceSum(float* data, std::size_t count, int root, const std::string& context) override;
  std::size_t startBroadcast(void* data, std::size_t bytes, int root, const std::string& context) override;
  void wait(std::size_t request) override;
  void progress() override;
  void allReduceSum(float* data, std::size_t count, const std::string& context) override;
  std::vector<std::string> allGather(const std::string& mine, const std::string& context) override;
  std::vector<std::string> gather(const std::string& mine, int root, const std::string& context) override;
  void barrier(const std::string& context) override;
  void send(const void* data, std::size_t bytes, int dest, const std::string& context) override;
  Received receive(void* data, std::size_t capacity, int source, const std::string& context) override;
  std::size_t startSend(const void* data, std::size_t bytes, int dest, int tag, const std::string& context) override;
  std::size_t startReceive(void* data, std::size_t capacity, int source, int tag, std::size_t* received,
                           const std::string& context) override;
  bool test(std::size_t request) override;
  std::unique_ptr<Window> exposeWindow(std::size_t count, const std::string& context) override;
  void expectLongWait() override { longWaitNext_ = true; }

  // Every rank's last step and when this rank last heard of it (Stall.h), kept in Arrivals.h.
  struct Arrivals;
  // How a wait sleeps between polls (see pollUntil in Polling.h): woken by `bell` (null:
  // plain sleeps), with long pauses until the first ring if `longPauses`, else without
  // back-off if `bytes` (what the wait moves) is large. With `arrivals` (null: no stall
  // reports), a long wait sends heartbeats and, after stallWarningSeconds(), names who has
  // not arrived, preferring `awaited` (a rank, or -1: every other rank).
  struct Patience {
    Doorbell* bell = nullptr;
    bool longPauses = false;
    Arrivals* arrivals = nullptr;
    int awaited = -1;
    std::size_t bytes = 0;
  };

 private:
  int rank_ = 0;
  int size_ = 1;
  std::string host_;
  std::vector<std::string> hosts_;      // by rank; empty before connect()
  std::unique_ptr<Doorbell> doorbell_;  // null before connect()
  bool longWaitNext_ = false;  // set by expectLongWait()
  // For this rank's next wait, which is for `awaited` (a rank, or -1: every other rank):
  // consumes longWaitNext_, and tells the others this rank's step if it changed.
  Patience patience(int awaited = -1, std::size_t bytes = 0);
  // A blocking collective over `count` elements of `elementBytes` in chunks of at most
  // `chunkBytes` (at most 1 GiB: MPI counts are ints): `start(offset, n, request)` starts the chunk's request and
  // returns MPI's code; each is waited for (`what` names it, `awaited` as for patience())
  // before the next starts.
  template <typename Start>
  void inChunks(std::size_t count, std::size_t elementBytes, std::size_t chunkBytes, const std::string& what, int awaited,
                Start start);
  std::unique_ptr<Arrivals> arrivals_;
  // Rings the ranks that receive what this rank just posted: the root of a broadcast
  // (FromRoot) rings every other rank, the contributors to a gather (ToRoot) ring the root,
  // everyone rings everyone in a symmetric collective. Ranks that a tree reaches through
  // another rank are woken by the first ring, before their data arrive. A reduction
  // (UpTree) rings only the rank that receives this rank's part, its parent in the tree:
  // the root hears its log2 N children, not all N ranks, per reduction, and the ranks
  // between are woken to pass the sums on (README, "Performance": rank 0's CPU per step).
  enum class Flow { ToRoot, UpTree, FromRoot, AllToAll };
  void wake(Flow flow, int root = 0);
  struct Started;  // the MPI_Requests of a start*() call, and what they are
  std::vector<std::unique_ptr<Started>> started_;
  void spend(Started& started);  // marks it waited for; once all are, the requests start anew
  // Starts `count` elements of `elementBytes` as chunks of at most 1 GiB, start(offset, n,
  // request) each; returns the request of them all.
  template <typename Start>
  std::size_t startInChunks(std::size_t count, std::size_t elementBytes, std::string what, Start start);
  // At least `count` zeros: the root's own part of a reduction, which it does not have.
  const float* zeros(std::size_t count);
  struct ZeroPages;
  std::vector<std::unique_ptr<ZeroPages>> zeroPages_;  // the last is the largest; all live on (in use by started reductions)
};

// MPI_Init_thread / MPI_Finalize for the lifetime of main(). abortJob() ends every rank
// of the job (MPI_Abort); use it after an error that other ranks cannot see.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  [[noreturn]] static void abortJob(int code);
  static std::string libraryVersion();
  // Whether the library granted MPI_THREAD_SERIALIZED or more: any thread may call MPI, one
  // at a time. Overlap on a GPU needs it (see LocalTrainer::streamGradients).
  static bool callableFromAnyThread();
  // Open MPI's mpi_yield_when_idle on this rank, and who chose it (recorded in run.json).
  static std::string yieldWhenIdleSetting() { return yieldWhenIdle(); }

 private:
  static int& threadLevel();  // as MPI_Init_thread provided it
  static std::string chooseYieldWhenIdle();  // before MPI_Init: may set the variable
  static std::string& yieldWhenIdle();
};

}  // namespace pstrain::comm::mpi
