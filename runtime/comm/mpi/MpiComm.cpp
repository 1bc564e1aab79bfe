#include "runtime/comm/mpi/MpiComm.h"

#include <fmt/format.h>
#include <mpi.h>

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "runtime/Errors.h"
#include "runtime/comm/mpi/Arrivals.h"
#include "runtime/comm/mpi/MpiCalls.h"
#include "runtime/comm/mpi/Polling.h"

namespace pstrain::comm::mpi {
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

}  // namespace pstrain::comm::mpi
