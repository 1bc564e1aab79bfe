#include "runtime/comm/mpi/MpiComm.h"

#include <fmt/format.h>
#include <mpi.h>

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <climits>
#include <cmath>
#include <iostream>
#include <random>
#include <thread>
#include <string>
#include <utility>
#include <vector>

#include "runtime/Errors.h"
#include "runtime/Stop.h"
#include "runtime/comm/Stall.h"
#include "runtime/metrics/Clock.h"

namespace pstrain::comm {
namespace {

// Open MPI's value of the MCA parameter `name` as this process sees it, wherever it was set
// (mpirun --mca, OMPI_MCA_* variables, the parameter files): read through the MPI tool
// interface (MPI_T), which knows the transport's parameters once MPI_Init opened it; its
// OMPI_MCA_ variable where MPI_T does not know the name (another MPI, a transport not
// loaded). "" when unset.
std::string mcaParameter(const char* name) {
  const char* fromEnvironment = std::getenv((std::string("OMPI_MCA_") + name).c_str());
  std::string value = fromEnvironment ? fromEnvironment : "";
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return value;
  int index = 0, count = 0;
  MPI_T_cvar_handle handle;
  if (MPI_T_cvar_get_index(name, &index) == MPI_SUCCESS &&
      MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
    MPI_Datatype type;
    int nameLength = 0, descriptionLength = 0, verbosity = 0, bind = 0, scope = 0;
    MPI_T_enum enumType;
    if (MPI_T_cvar_get_info(index, nullptr, &nameLength, &verbosity, &type, &enumType, nullptr, &descriptionLength,
                            &bind, &scope) == MPI_SUCCESS && type == MPI_CHAR && count > 0) {
      std::vector<char> text(static_cast<std::size_t>(count) + 1, '\0');
      if (MPI_T_cvar_read(handle, text.data()) == MPI_SUCCESS) value = text.data();
    }
    MPI_T_cvar_handle_free(&handle);
  }
  MPI_T_finalize();
  return value;
}

void check(int rc, const std::string& what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw CommError(fmt::format("{} failed: {}", what, std::string(text, length)));
}

constexpr int kArrivalTag = 1;  // the step messages use tag 0

}  // namespace

// Every rank's last step as it told this one, and when this one last heard from it:
// kArrivalTag messages of one int64, sent to every other rank when this rank first waits in
// a step and, as heartbeats, every beatEvery() while a wait lasts. Read when this rank
// changes step (so that they never pile up in MPI's queue of unexpected messages), at each
// of its own heartbeats, and when a wait needs them. A send to a rank whose previous one is
// still out is skipped: that rank hears the newer step at the next.
struct MpiComm::Arrivals {
  explicit Arrivals(const MpiComm& comm)
      : comm(comm), last(comm.size_, -1), heard(comm.size_, -1e300), out(comm.size_, 0),
        sends(comm.size_, MPI_REQUEST_NULL) {}
  ~Arrivals() {
    for (auto& request : sends) {
      if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);  // completes on its own
    }
  }

  // --stall-warning capped by --timeout; 0: no stall reports, no heartbeats.
  double warnEvery() const { return std::min(comm.stallWarningSeconds(), comm.timeoutSeconds()); }
  double beatEvery() const { return std::min(1.0, warnEvery() / 4); }

  void announce(std::int64_t step) {
    if (step == announced || warnEvery() <= 0) return;
    announced = step;
    heartbeat();
  }

  void heartbeat() {
    for (int r = 0; r < static_cast<int>(sends.size()); ++r) {
      if (r == comm.rank_) continue;
      int done = 1;
      if (sends[r] != MPI_REQUEST_NULL) check(MPI_Test(&sends[r], &done, MPI_STATUS_IGNORE), "telling the step");
      if (!done) continue;
      out[r] = announced;
      check(MPI_Isend(&out[r], 1, MPI_INT64_T, r, kArrivalTag, MPI_COMM_WORLD, &sends[r]), "telling the step");
    }
    drain();
  }

  // Who this rank waits for (Stall.h): silent are the ranks not heard from in three
  // heartbeats.
  std::string missing(int awaited) {
    drain();
    const double now = metrics::steadySeconds();
    std::vector<RankNews> news(last.size());
    for (std::size_t r = 0; r < news.size(); ++r) news[r] = {last[r], now - heard[r] > 3 * beatEvery()};
    return describeMissing(comm.rank_, currentStep(), news, comm.hosts_, awaited);
  }

 private:
  void drain() {
    for (;;) {
      int found = 0;
      MPI_Status status;
      check(MPI_Iprobe(MPI_ANY_SOURCE, kArrivalTag, MPI_COMM_WORLD, &found, &status), "reading the others' steps");
      if (!found) return;
      std::int64_t step = 0;
      check(MPI_Recv(&step, 1, MPI_INT64_T, status.MPI_SOURCE, kArrivalTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
            "reading the others' steps");
      last[status.MPI_SOURCE] = std::max(last[status.MPI_SOURCE], step);
      heard[status.MPI_SOURCE] = metrics::steadySeconds();
    }
  }

  const MpiComm& comm;
  std::int64_t announced = -1;
  std::vector<std::int64_t> last;  // by rank
  std::vector<double> heard;       // by rank: steady seconds of the last message
  std::vector<std::int64_t> out;   // by rank: the value in flight
  std::vector<MPI_Request> sends;  // by rank
};

namespace {

// Polls `done()` until it says true, sleeping between polls so that a rank that waits for
// slower peers does not steal a core from them. Each wake-up costs CPU, and a sleep lasts
// tens of microseconds longer than asked (timer slack, wake-up), so pauses start at 50 us
// and double, up to 2 ms (README, "Performance").
// A peer that posts something this rank waits for rings the doorbell (patience.bell; null:
// plain sleeps), which ends the pause at once. Then the next 64 polls spin, as at the start,
// and the pauses start again from 50 us: the data may still be on the way, and over TCP
// they move only while this rank polls.
// A wait that moves a large message (patience.bytes, 64 KiB or more; not a long wait) keeps
// its pauses at 50 us: such a message moves only while both ranks poll where shared memory
// has no single copy (macOS; a container without ptrace) and over TCP. With 2 ms pauses a
// 233 MB model took 1.39 s a step to cross shared memory so, 0.11 s without them (README,
// "Performance"; tools/bench-shm).
// A long wait (patience.longPauses: nothing can be on the way before a peer posts and
// rings) lets the pauses grow to 16 ms instead, until the first ring, once the doorbell has
// heard every rank (so that a ring will come). The server waiting for a step's first
// gradient bucket, through the workers' forward and most of backward, then wakes about
// half as often.
// With more ranks than cores, the spins rely on Open MPI's mpi_yield_when_idle (which
// MpiSession sets there): each idle MPI_Test then yields the core to a rank that computes.
// A wait that lasts patience.warnEvery prints who has not arrived, and again every interval.
// Time this process did not run counts for neither (WaitClock).
template <typename Done>
void pollUntil(Done done, double timeoutSeconds, const std::string& what, MpiComm::Patience patience) {
  using std::chrono::microseconds;
  WaitClock clock(metrics::Clock::now());  // waits count only while this process runs
  MpiComm::Arrivals* arrivals = patience.arrivals;
  const double warnEvery = arrivals ? arrivals->warnEvery() : 0;
  const double beatEvery = arrivals ? arrivals->beatEvery() : 0;
  int beats = 0;
  double nextWarning = warnEvery > 0 ? warnEvery : HUGE_VAL, nextBeat = warnEvery > 0 ? beatEvery : HUGE_VAL;
  constexpr int kSpins = 64;  // a short spin first: most waits on one host end in microseconds
  constexpr microseconds kFirstPause(50), kPollingCap(2000), kLongWaitCap(16000);
  constexpr std::size_t kLargeMessage = std::size_t(64) << 10;
  microseconds pause = kFirstPause;
  Doorbell* bell = patience.bell;
  const bool longWait = patience.longPauses && bell && bell->hearsEveryone();
  const bool noBackOff = patience.bytes >= kLargeMessage && !patience.longPauses;
  bool rung = false;  // in this wait
  for (int spins = kSpins;;) {
    if (done()) return;
    const double waited = clock.waited(metrics::Clock::now());
    if (waited > timeoutSeconds) {
      throw CommError(fmt::format(
          "{}: no answer from the other ranks within {} s (a rank died, hangs or is unreachable; "
          "raise --timeout if steps are really this slow){}",
          what, timeoutSeconds, warnEvery > 0 ? "; waiting for " + arrivals->missing(patience.awaited) : ""));
    }
    if (waited >= nextBeat) nextBeat = (arrivals->heartbeat(), beatEvery * (++beats + 1));
    if (waited >= nextWarning) {
      // One write, flushed: the line must show while the job hangs.
      std::cerr << stallLine(currentStep(), waited, arrivals->missing(patience.awaited)) + "\n" << std::flush;
      nextWarning = waited + warnEvery;
    }
    if (spins > 0) {
      --spins;
      continue;
    }
    if (!bell) {
      std::this_thread::sleep_for(pause);
    } else if (bell->sleep(pause)) {
      rung = true;
      spins = kSpins;
      pause = kFirstPause;
      continue;
    }
    if (noBackOff) continue;  // pause stays kFirstPause
    pause = std::min(pause * 2, longWait && !rung ? kLongWaitCap : kPollingCap);
  }
}

void waitFor(MPI_Request& request, double timeoutSeconds, const std::string& what, MpiComm::Patience patience,
             MPI_Status* status = MPI_STATUS_IGNORE) {
  pollUntil([&] {
    int done = 0;
    check(MPI_Test(&request, &done, status), what);
    return done != 0;
  }, timeoutSeconds, what, patience);
}

int intCount(std::size_t count, const std::string& what) {
  if (count > static_cast<std::size_t>(INT_MAX)) {
    throw CommError(fmt::format("{}: {} elements is more than one MPI message can carry", what, count));
  }
  return static_cast<int>(count);
}

// MPI counts are ints: move large buffers in chunks of at most 1 GiB.
constexpr std::size_t kMaxChunk = std::size_t(1) << 30;
// A blocking reduction moves in chunks of 64 MiB, one after the other: Open MPI's reduce
// (libnbc) holds a temporary as large as the reduction on the root and on every rank with
// children in its tree. In whole-gradient chunks that was one more copy of the model on
// rank 0 (162 M parameters, AdamW and --clip-grad-norm: 5 copies instead of 4; 105 M: 2186
// MiB of peak RSS, 1847 in 64 MiB chunks, the weights bit-identical).
constexpr std::size_t kReduceChunk = std::size_t(1) << 26;

}  // namespace

// The root's part of a reduction. Not MPI_IN_PLACE: then the root's buffer would be part
// of the sum, so the caller would clear it every step and libnbc would copy it when the
// reduction starts (LeNet: a memset and a memcpy of 1.6 MiB per step on the server). These are
// read-only anonymous pages: they read as zeros and, never written, take no memory of
// their own (Linux maps them all to the shared zero page).
struct MpiComm::ZeroPages {
  explicit ZeroPages(std::size_t bytes) : bytes(bytes) {
    base = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) throw CommError(fmt::format("cannot map {} bytes of zeros for a reduction", bytes));
  }
  ~ZeroPages() { ::munmap(base, bytes); }
  ZeroPages(const ZeroPages&) = delete;
  ZeroPages& operator=(const ZeroPages&) = delete;
  std::size_t bytes;
  void* base;
};

const float* MpiComm::zeros(std::size_t count) {
  const std::size_t bytes = std::max<std::size_t>(count * sizeof(float), 1);
  if (zeroPages_.empty() || zeroPages_.back()->bytes < bytes) {
    const std::size_t doubled = zeroPages_.empty() ? 0 : 2 * zeroPages_.back()->bytes;
    zeroPages_.push_back(std::make_unique<ZeroPages>(std::max(bytes, doubled)));
  }
  return static_cast<const float*>(zeroPages_.back()->base);
}

MpiComm::MpiComm() {
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  char name[MPI_MAX_PROCESSOR_NAME];
  int length = 0;
  MPI_Get_processor_name(name, &length);
  host_.assign(name, length);
  // Errors come back as return codes so that they become CommErrors with context.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  arrivals_ = std::make_unique<Arrivals>(*this);
}

void MpiComm::connect(bool enabled) {
  hosts_ = MpiComm::allGather(host_, "start-up (host names)");
  // A job on one host rings over the loopback alone: no other machine can reach it. One
  // host as Open MPI places ranks (shared memory), not by name: cloned machines, and
  // network namespaces, can share a host name.
  MPI_Comm local = MPI_COMM_NULL;
  int localSize = 0;
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local), "start-up (ranks per host)");
  MPI_Comm_size(local, &localSize);
  MPI_Comm_free(&local);
  const bool oneHost = localSize == size_;
  doorbell_ = std::make_unique<Doorbell>(
      Doorbell::Interfaces{mcaParameter("btl_tcp_if_include"), mcaParameter("btl_tcp_if_exclude")}, enabled, oneHost);
  std::uint64_t key[2] = {0, 0};
  if (rank_ == 0) {
    std::random_device entropy;  // the kernel's random source
    for (auto& half : key) half = static_cast<std::uint64_t>(entropy()) << 32 | entropy();
  }
  broadcast(key, sizeof key, 0, "start-up (doorbell key)");
  doorbell_->connect(MpiComm::allGather(doorbell_->address(), "start-up (doorbell addresses)"), rank_,
                     Doorbell::Key{key[0], key[1]});
  wake(Flow::AllToAll);  // so that each rank learns whose rings reach it (Doorbell::hearsEveryone)
}

void MpiComm::wake(Flow flow, int root) {
  if (!doorbell_) return;
  if (flow == Flow::UpTree) return doorbell_->ring(Doorbell::treeParent(rank_, root, size_));  // root: -1, none
  for (int r = 0; r < size_; ++r) {
    const bool receives = flow == Flow::ToRoot ? r == root : flow == Flow::FromRoot ? rank_ == root : true;
    if (r != rank_ && receives) doorbell_->ring(r);
  }
}

template <typename Start>
void MpiComm::inChunks(std::size_t count, std::size_t elementBytes, std::size_t chunkBytes, const std::string& what,
                       int awaited, Start start) {
  const std::size_t chunk = chunkBytes / elementBytes;
  std::size_t offset = 0;
  do {
    const int n = static_cast<int>(std::min(chunk, count - offset));
    MPI_Request request;
    check(start(offset, n, request), what);
    waitFor(request, timeoutSeconds(), what, patience(awaited, static_cast<std::size_t>(n) * elementBytes));
    offset += static_cast<std::size_t>(n);
  } while (offset < count);
}

void MpiComm::broadcast(void* data, std::size_t bytes, int root, const std::string& context) {
  auto* base = static_cast<char*>(data);
  inChunks(bytes, 1, kMaxChunk, "broadcast at " + context, root, [&](std::size_t offset, int n, MPI_Request& r) {
    const int code = MPI_Ibcast(base + offset, n, MPI_BYTE, root, MPI_COMM_WORLD, &r);
    wake(Flow::FromRoot, root);
    return code;
  });
}

void MpiComm::reduceSum(float* data, std::size_t count, int root, const std::string& context) {
  inChunks(count, sizeof(float), kReduceChunk, "reduce at " + context, -1, [&](std::size_t offset, int n, MPI_Request& r) {
    const float* send = rank_ == root ? zeros(n) : data + offset;
    const int code = MPI_Ireduce(send, data + offset, n, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD, &r);
    wake(Flow::UpTree, root);
    return code;
  });
}

// A started operation: one request per chunk of at most kMaxChunk bytes (MPI counts are
// ints), all started at once, in the same order on every rank.
// A started point-to-point message is one request; a receive writes the size it got to
// `received` as it completes (whichever call sees it complete: wait, test or progress).
struct MpiComm::Started {
  std::vector<MPI_Request> requests;
  std::vector<std::size_t> bytes;  // by request
  std::string what;
  bool waited = false;
  std::size_t* received = nullptr;

  // Whether request `i` is done (MPI_Test), recording a receive's size when it completes now.
  bool poll(std::size_t i) {
    if (requests[i] == MPI_REQUEST_NULL) return true;
    int done = 0;
    MPI_Status status;
    check(MPI_Test(&requests[i], &done, &status), what);
    if (done) record(status);
    return done != 0;
  }
  void record(const MPI_Status& status) {
    if (!received) return;
    MPI_Count count = 0;
    check(MPI_Get_elements_x(&status, MPI_BYTE, &count), what);
    *received = static_cast<std::size_t>(std::max<MPI_Count>(count, 0));
  }
};

MpiComm::~MpiComm() = default;

MpiComm::Patience MpiComm::patience(int awaited, std::size_t bytes) {
  arrivals_->announce(currentStep());
  return {doorbell_.get(), std::exchange(longWaitNext_, false), arrivals_.get(), awaited, bytes};
}

template <typename Start>
std::size_t MpiComm::startInChunks(std::size_t count, std::size_t elementBytes, std::string what, Start start) {
  auto started = std::make_unique<Started>();
  started->what = std::move(what);
  const std::size_t chunk = kMaxChunk / elementBytes;
  for (std::size_t offset = 0; offset < count || (count == 0 && started->requests.empty()); offset += chunk) {
    const int n = static_cast<int>(std::min(chunk, count - offset));
    started->requests.push_back(MPI_REQUEST_NULL);
    started->bytes.push_back(static_cast<std::size_t>(n) * elementBytes);
    check(start(offset, n, started->requests.back()), started->what);
  }
  started_.push_back(std::move(started));
  return started_.size() - 1;
}

std::size_t MpiComm::startReduceSum(float* data, std::size_t count, int root, const std::string& context) {
  const float* send = rank_ == root ? zeros(std::min(count, kMaxChunk / sizeof(float))) : data;
  const std::size_t request = startInChunks(count, sizeof(float), "reduce at " + context,
                                            [&](std::size_t offset, int n, MPI_Request& r) {
    return MPI_Ireduce(rank_ == root ? send : send + offset, data + offset, n, MPI_FLOAT, MPI_SUM, root,
                       MPI_COMM_WORLD, &r);
  });
  wake(Flow::UpTree, root);
  return request;
}

std::size_t MpiComm::startBroadcast(void* data, std::size_t bytes, int root, const std::string& context) {
  auto* base = static_cast<char*>(data);
  const std::size_t request = startInChunks(bytes, 1, "broadcast at " + context,
                                            [&](std::size_t offset, int n, MPI_Request& r) {
    return MPI_Ibcast(base + offset, n, MPI_BYTE, root, MPI_COMM_WORLD, &r);
  });
  wake(Flow::FromRoot, root);
  return request;
}

void MpiComm::wait(std::size_t request) {
  Started& started = *started_.at(request);
  for (std::size_t i = 0; i < started.requests.size(); ++i) {
    if (started.requests[i] == MPI_REQUEST_NULL) continue;
    MPI_Status status;
    waitFor(started.requests[i], timeoutSeconds(), started.what, patience(-1, started.bytes[i]), &status);
    started.record(status);
  }
  spend(started);
}

bool MpiComm::test(std::size_t request) {
  Started& started = *started_.at(request);
  if (started.waited) return true;
  for (std::size_t i = 0; i < started.requests.size(); ++i) {
    if (!started.poll(i)) return false;
  }
  spend(started);
  return true;
}

void MpiComm::spend(Started& started) {
  started.waited = true;
  if (std::all_of(started_.begin(), started_.end(), [](const auto& s) { return s->waited; })) started_.clear();
}

void MpiComm::progress() {
  for (auto& started : started_) {
    for (std::size_t i = 0; i < started->requests.size(); ++i) started->poll(i);
  }
}

void MpiComm::allReduceSum(float* data, std::size_t count, const std::string& context) {
  inChunks(count, sizeof(float), kReduceChunk, "allreduce at " + context, -1, [&](std::size_t offset, int n, MPI_Request& r) {
    const int code = MPI_Iallreduce(MPI_IN_PLACE, data + offset, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);
    wake(Flow::AllToAll);
    return code;
  });
}

std::vector<std::string> MpiComm::gather(const std::string& mine, int root, const std::string& context) {
  const std::string what = "gather at " + context;
  int length = intCount(mine.size(), what);
  std::vector<int> lengths(size_);
  MPI_Request request;
  check(MPI_Igather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, root, MPI_COMM_WORLD, &request), what);
  wake(Flow::ToRoot, root);
  waitFor(request, timeoutSeconds(), what, patience());
  std::vector<int> offsets(size_, 0);
  std::size_t total = 0;
  for (int r = 0; r < size_ && rank_ == root; ++r) {
    if (lengths[r] < 0) throw CommError(fmt::format("{}: rank {} announced {} bytes", what, r, lengths[r]));
    offsets[r] = intCount(total, what);
    total += static_cast<std::size_t>(lengths[r]);
  }
  intCount(total, what);
  std::string joined(rank_ == root ? total : 0, '\0');
  check(MPI_Igatherv(mine.data(), length, MPI_CHAR, joined.data(), lengths.data(), offsets.data(), MPI_CHAR, root,
                     MPI_COMM_WORLD, &request), what);
  wake(Flow::ToRoot, root);
  waitFor(request, timeoutSeconds(), what, patience());
  std::vector<std::string> all;
  if (rank_ == root) {
    for (int r = 0; r < size_; ++r) all.push_back(joined.substr(offsets[r], lengths[r]));
  }
  return all;
}

void MpiComm::barrier(const std::string& context) {
  MPI_Request request;
  check(MPI_Ibarrier(MPI_COMM_WORLD, &request), "barrier at " + context);
  wake(Flow::AllToAll);
  waitFor(request, timeoutSeconds(), "barrier at " + context, patience());
}

namespace {

// The bytes of a point-to-point message as (count, datatype): MPI_BYTEs up to INT_MAX; past
// it one element of a type spanning `bytes` (BigMPI's way: whole chunks of kMaxChunk bytes,
// then the rest), so that a message stays one message, which a matched probe takes whole.
// Its type signature is `bytes` bytes either way: a sender and a receiver may pick either.
struct ByteSpan {
  ByteSpan(std::size_t bytes, const std::string& what) {
    if (bytes <= static_cast<std::size_t>(INT_MAX)) {
      count = static_cast<int>(bytes);
      return;
    }
    MPI_Datatype chunk;
    check(MPI_Type_contiguous(static_cast<int>(kMaxChunk), MPI_BYTE, &chunk), what);
    int lengths[2] = {static_cast<int>(bytes / kMaxChunk), static_cast<int>(bytes % kMaxChunk)};
    MPI_Aint displacements[2] = {0, static_cast<MPI_Aint>(bytes / kMaxChunk * kMaxChunk)};
    MPI_Datatype types[2] = {chunk, MPI_BYTE};
    check(MPI_Type_create_struct(2, lengths, displacements, types, &type), what);
    check(MPI_Type_commit(&type), what);
    MPI_Type_free(&chunk);
    count = 1;
    owned = true;
  }
  // MPI_Type_free while a transfer uses the type is allowed: the transfer completes normally.
  ~ByteSpan() {
    if (owned) MPI_Type_free(&type);
  }
  ByteSpan(const ByteSpan&) = delete;
  ByteSpan& operator=(const ByteSpan&) = delete;

  int count = 0;
  MPI_Datatype type = MPI_BYTE;
  bool owned = false;
};

}  // namespace

void MpiComm::send(const void* data, std::size_t bytes, int dest, const std::string& context) {
  const std::string what = fmt::format("send to rank {} at {}", dest, context);
  const ByteSpan span(bytes, what);
  MPI_Request request;
  check(MPI_Isend(data, span.count, span.type, dest, 0, MPI_COMM_WORLD, &request), what);
  if (doorbell_) doorbell_->ring(dest);
  waitFor(request, timeoutSeconds(), what, patience(dest, bytes));
}

Communicator::Received MpiComm::receive(void* data, std::size_t capacity, int source, const std::string& context) {
  const std::string what = source == kAnySource ? "receive at " + context
                                                : fmt::format("receive from rank {} at {}", source, context);
  MPI_Message message;
  MPI_Status status;
  pollUntil([&] {
    int found = 0;
    check(MPI_Improbe(source == kAnySource ? MPI_ANY_SOURCE : source, 0, MPI_COMM_WORLD, &found, &message, &status),
          what);
    return found != 0;
  }, timeoutSeconds(), what, patience(source == kAnySource ? -1 : source));
  MPI_Count bytes = 0;  // a message may be larger than an int counts (ByteSpan)
  check(MPI_Get_elements_x(&status, MPI_BYTE, &bytes), what);
  if (bytes < 0) throw CommError(fmt::format("{}: a message of undefined size", what));
  Received got{status.MPI_SOURCE, static_cast<std::size_t>(bytes)};
  const ByteSpan span(got.bytes, what);
  if (got.bytes > capacity) {
    // Take it off the queue anyway, so the error is the only consequence.
    std::string sink(got.bytes, '\0');
    check(MPI_Mrecv(sink.data(), span.count, span.type, &message, MPI_STATUS_IGNORE), what);
    throw CommError(fmt::format("{}: a message of {} bytes from rank {}, expected at most {}", what, got.bytes,
                                got.source, capacity));
  }
  MPI_Request request;
  check(MPI_Imrecv(data, span.count, span.type, &message, &request), what);
  waitFor(request, timeoutSeconds(), what, patience(got.source, got.bytes));
  return got;
}

std::size_t MpiComm::startSend(const void* data, std::size_t bytes, int dest, int tag, const std::string& context) {
  auto started = std::make_unique<Started>();
  started->what = fmt::format("send to rank {} at {}", dest, context);
  if (tag < kFirstFreeTag) throw InternalError(fmt::format("{}: tag {} is taken", started->what, tag));
  const ByteSpan span(bytes, started->what);
  started->requests.push_back(MPI_REQUEST_NULL);
  started->bytes.push_back(bytes);
  check(MPI_Isend(data, span.count, span.type, dest, tag, MPI_COMM_WORLD, &started->requests.back()), started->what);
  if (doorbell_) doorbell_->ring(dest);
  started_.push_back(std::move(started));
  return started_.size() - 1;
}

std::size_t MpiComm::startReceive(void* data, std::size_t capacity, int source, int tag, std::size_t* received,
                                  const std::string& context) {
  auto started = std::make_unique<Started>();
  started->what = fmt::format("receive from rank {} at {}", source, context);
  if (tag < kFirstFreeTag) throw InternalError(fmt::format("{}: tag {} is taken", started->what, tag));
  const ByteSpan span(capacity, started->what);
  started->requests.push_back(MPI_REQUEST_NULL);
  started->bytes.push_back(capacity);
  started->received = received;
  check(MPI_Irecv(data, span.count, span.type, source, tag, MPI_COMM_WORLD, &started->requests.back()), started->what);
  started_.push_back(std::move(started));
  return started_.size() - 1;
}

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

std::vector<std::string> MpiComm::allGather(const std::string& mine, const std::string& context) {
  const std::string what = "allgather at " + context;
  int length = intCount(mine.size(), what);
  std::vector<int> lengths(size_);
  MPI_Request request;
  check(MPI_Iallgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD, &request), what);
  wake(Flow::AllToAll);
  waitFor(request, timeoutSeconds(), what, patience());
  // Offsets in MPI's ints: a total past INT_MAX is an error, not a wrapped offset.
  std::vector<int> offsets(size_, 0);
  std::size_t total = 0;
  for (int r = 0; r < size_; ++r) {
    if (lengths[r] < 0) throw CommError(fmt::format("{}: rank {} announced {} bytes", what, r, lengths[r]));
    offsets[r] = intCount(total, what);
    total += static_cast<std::size_t>(lengths[r]);
  }
  intCount(total, what);
  std::string joined(total, '\0');
  check(MPI_Iallgatherv(mine.data(), length, MPI_CHAR, joined.data(), lengths.data(),
                        offsets.data(), MPI_CHAR, MPI_COMM_WORLD, &request), what);
  wake(Flow::AllToAll);
  waitFor(request, timeoutSeconds(), what, patience());
  std::vector<std::string> all;
  for (int r = 0; r < size_; ++r) all.push_back(joined.substr(offsets[r], lengths[r]));
  return all;
}

MpiSession::MpiSession(int* argc, char*** argv) {
  // Non-blocking reductions progress only inside MPI calls, and waitFor() sleeps between
  // them. libnbc's default for large messages is a segmented chain: one MPI_Test per
  // segment, so every segment costs a sleep (hundreds of times slower per step). A binomial
  // tree moves a buffer in a few rounds. The environment (or an mpirun --mca) still wins:
  // setenv does not overwrite.
  ::setenv("OMPI_MCA_coll_libnbc_ireduce_algorithm", "2", 0);
  // The all-reduce likewise: its default for a model-sized buffer was a binomial reduce and
  // broadcast, log N whole-buffer hops each way; Rabenseifner's (reduce-scatter, then
  // all-gather) moves about two buffers per rank in all (README, "Performance", and
  // tools/bench-scale measure it).
  ::setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", 0);
  // Between hosts (TCP), a message above btl_tcp_eager_limit (64 KiB) waits for the
  // receiver's answer and then moves in fragments, each only while both ranks are inside an
  // MPI call: with waitFor()'s sleeps every hop of a tree collective stalls for pauses. At
  // 512 KiB a gradient bucket (256 KiB, --bucket-kb) goes out at once, as one fragment
  // (README, "Performance"; tools/bench-scale). Larger limits slow the point-to-point
  // modes, whose whole-model messages then all arrive at the server's link at once.
  for (const char* name : {"OMPI_MCA_btl_tcp_eager_limit", "OMPI_MCA_btl_tcp_rndv_eager_limit",
                           "OMPI_MCA_btl_tcp_max_send_size"}) {
    ::setenv(name, "524288", 0);
  }
  yieldWhenIdle() = chooseYieldWhenIdle();
  // SERIALIZED, not FUNNELED: with --overlap on a GPU, a worker's gradient hooks start
  // reductions from autograd's device thread while the main thread waits inside backward()
  // (tests/gpu proves which thread runs them). Calls never overlap, so this level suffices.
  check(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &threadLevel()), "MPI_Init_thread");
}

// More ranks on this host than it has cores: a rank that spins in an MPI call takes the
// core of one that computes, so an MPI call that finds nothing to do must yield it (Open
// MPI's mpi_yield_when_idle). Open MPI turns that on only where a host has more ranks than
// hostfile slots, which says nothing about cores; it tells every rank its host's rank count
// before MPI_Init, so pstrain decides here. The user's own setting (environment, or
// mpirun --mca, which arrives as the same variable) wins.
std::string MpiSession::chooseYieldWhenIdle() {
  constexpr const char* kVariable = "OMPI_MCA_mpi_yield_when_idle";
  if (const char* set = std::getenv(kVariable)) return fmt::format("{} (set by the user)", set);
  const char* localSize = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const unsigned cores = std::thread::hardware_concurrency();
  const long ranks = localSize ? std::strtol(localSize, nullptr, 10) : 0;
  if (cores == 0 || ranks <= static_cast<long>(cores)) return "default";
  ::setenv(kVariable, "1", 1);
  return fmt::format("1 (set by pstrain: {} ranks on {} cores)", ranks, cores);
}

std::string& MpiSession::yieldWhenIdle() {
  static std::string choice = "default";
  return choice;
}

int& MpiSession::threadLevel() {
  static int provided = MPI_THREAD_SINGLE;
  return provided;
}

bool MpiSession::callableFromAnyThread() { return threadLevel() >= MPI_THREAD_SERIALIZED; }

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
