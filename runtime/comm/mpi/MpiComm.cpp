#include "runtime/comm/mpi/MpiComm.h"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <thread>

#include "runtime/Errors.h"

namespace pstrain::comm {
namespace {

void check(int rc, const std::string& what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw CommError(fmt::format("{} failed: {}", what, std::string(text, length)));
}

// Completes `request`, sleeping between polls (1 us doubling to 2 ms) so that a rank that
// waits for slower peers does not steal a core from them.
void waitFor(MPI_Request& request, double timeoutSeconds, const std::string& what) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeoutSeconds));
  std::chrono::microseconds pause(1);
  const std::chrono::microseconds maxPause(2000);
  for (int polls = 0;; ++polls) {
    int done = 0;
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
    if (Clock::now() > deadline) {
      throw CommError(fmt::format(
          "{}: no answer from the other ranks within {} s (a rank died, hangs or is unreachable; "
          "raise --timeout if steps are really this slow)",
          what, timeoutSeconds));
    }
    if (polls < 64) continue;  // a short spin first: most waits on one host end in microseconds
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, maxPause);
  }
}

// MPI counts are ints: move large buffers in chunks of at most 1 GiB.
constexpr std::size_t kMaxChunk = std::size_t(1) << 30;

}  // namespace

MpiComm::MpiComm() {
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  char name[MPI_MAX_PROCESSOR_NAME];
  int length = 0;
  MPI_Get_processor_name(name, &length);
  host_.assign(name, length);
  // Errors come back as return codes so that they become CommErrors with context.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

void MpiComm::broadcast(void* data, std::size_t bytes, int root, const std::string& context) {
  auto* base = static_cast<char*>(data);
  std::size_t offset = 0;
  do {
    int n = static_cast<int>(std::min(kMaxChunk, bytes - offset));
    MPI_Request request;
    check(MPI_Ibcast(base + offset, n, MPI_BYTE, root, MPI_COMM_WORLD, &request), "broadcast at " + context);
    waitFor(request, timeoutSeconds(), "broadcast at " + context);
    offset += n;
  } while (offset < bytes);
}

void MpiComm::reduceSum(float* data, std::size_t count, int root, const std::string& context) {
  const std::size_t chunk = kMaxChunk / sizeof(float);
  std::size_t offset = 0;
  do {
    int n = static_cast<int>(std::min(chunk, count - offset));
    MPI_Request request;
    const void* send = rank_ == root ? MPI_IN_PLACE : data + offset;
    check(MPI_Ireduce(send, data + offset, n, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD, &request), "reduce at " + context);
    waitFor(request, timeoutSeconds(), "reduce at " + context);
    offset += n;
  } while (offset < count);
}

std::vector<std::string> MpiComm::allGather(const std::string& mine, const std::string& context) {
  const std::string what = "allgather at " + context;
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(size_);
  MPI_Request request;
  check(MPI_Iallgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD, &request), what);
  waitFor(request, timeoutSeconds(), what);
  std::vector<int> offsets(size_, 0);
  for (int r = 1; r < size_; ++r) offsets[r] = offsets[r - 1] + lengths[r - 1];
  std::string joined(static_cast<std::size_t>(offsets.back() + lengths.back()), '\0');
  check(MPI_Iallgatherv(mine.data(), length, MPI_CHAR, joined.data(), lengths.data(),
                        offsets.data(), MPI_CHAR, MPI_COMM_WORLD, &request), what);
  waitFor(request, timeoutSeconds(), what);
  std::vector<std::string> all;
  for (int r = 0; r < size_; ++r) all.push_back(joined.substr(offsets[r], lengths[r]));
  return all;
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiSession::abortJob(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

std::string MpiSession::libraryVersion() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(text, &length);
  std::string version(text, length);
  auto end = version.find_first_of(",\n");
  return version.substr(0, end);
}

}  // namespace pstrain::comm
