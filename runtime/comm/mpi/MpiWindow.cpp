// MpiComm's one-sided windows (gossip's peers read each other's weights).
#include <mpi.h>

#include <algorithm>
#include <memory>
#include <string>

#include "runtime/comm/mpi/MpiCalls.h"
#include "runtime/comm/mpi/MpiComm.h"
#include "runtime/comm/mpi/Polling.h"

namespace pstrain::comm::mpi {

namespace {

// MPI_Win_allocate'd floats. Readers take a shared lock on the owner's window and fetch
// with a request-based get, so a read is bounded by the timeout like every other wait.
class MpiWindow : public Window {
 public:
  MpiWindow(MpiComm& comm, std::size_t count, const std::string& context) : Window(count), comm_(comm) {
    const std::string what = "creating the one-sided window at " + context;
    intCount(count, what);
    check(MPI_Win_allocate(static_cast<MPI_Aint>(count * sizeof(float)), sizeof(float), MPI_INFO_NULL,
                           MPI_COMM_WORLD, &base_, &window_), what);
    MPI_Win_set_errhandler(window_, MPI_ERRORS_RETURN);
    std::fill(base_, base_ + count, 0.0f);
    comm.barrier(what);  // nobody reads a window before its owner zeroed it
  }

  ~MpiWindow() override = default;  // without close(): abandoned (see Window)

  void publish(const float* data) override {
    const int me = comm_.rank();
    check(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, me, 0, window_), "locking this rank's window");
    std::copy(data, data + count(), base_);
    check(MPI_Win_unlock(me, window_), "unlocking this rank's window");
  }

  void read(int peer, float* out, const std::string& context) override {
    const std::string what = fmt::format("reading rank {}'s window at {}", peer, context);
    check(MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, window_), what);
    MPI_Request request;
    const int n = static_cast<int>(count());
    check(MPI_Rget(out, n, MPI_FLOAT, peer, 0, n, MPI_FLOAT, window_, &request), what);
    waitFor(request, comm_.timeoutSeconds(), what, {});  // nobody rings a reader
    check(MPI_Win_unlock(peer, window_), what);
  }

  void close(const std::string& context) override {
    comm_.barrier("closing the window at " + context);  // bounded; MPI_Win_free is not
    check(MPI_Win_free(&window_), "freeing the window at " + context);
  }

 private:
  MpiComm& comm_;
  float* base_ = nullptr;
  MPI_Win window_ = MPI_WIN_NULL;
};

}  // namespace

std::unique_ptr<Window> MpiComm::exposeWindow(std::size_t count, const std::string& context) {
  return std::make_unique<MpiWindow>(*this, count, context);
}

}  // namespace pstrain::comm::mpi
