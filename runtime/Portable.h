#pragma once
// What differs between Linux and macOS (DESIGN.md, "Platforms"), in one place: every call
// that only one of them has lives in Portable.cpp, behind `__linux__` or `__APPLE__` with a
// portable path beside it (the portability check's lint enforces it). Torch-free.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pstrain::portable {

// When process `pid` started, in seconds on the clock of startClockSeconds() (Linux: since
// boot, 10 ms resolution; macOS: since the epoch, 1 µs), if the system tells.
std::optional<double> processStartSeconds(long pid);
double startClockSeconds();

// The processes whose parent is `pid` (Linux: from /proc; macOS: proc_listchildpids), none
// when the system does not say.
std::vector<long> childProcesses(long pid);

// This process's resident memory now, MiB (Linux: /proc/self/statm; macOS: proc_pidinfo's
// task info); 0 where the system does not say.
double residentMib();

// This process's peak resident memory so far, MiB (getrusage's ru_maxrss is KiB on Linux
// and bytes on macOS).
double peakRssMib();

// Makes what was written to `fd` durable. macOS's fsync leaves the data in the drive's
// cache, so there F_FULLFSYNC first; a file system that refuses it (SMB shares: ENOTSUP)
// gets fsync. Returns false, with errno set, when the data may not be on disk.
bool syncToDisk(int fd);

// Makes the C library keep the memory a training step frees for the next step, for blocks
// smaller than `largestKept` bytes. glibc's malloc otherwise serves many activation-sized
// blocks (from 128 KiB) with mmap and returns them with munmap, so every step faults the
// same pages in again: about 10% of a ResNet-20 step on the CPU (tools/bench (1)). Larger
// blocks go back when freed: kept in the heap, a big model's (a language model's logits, a
// 147 MiB embedding's gradient) fragment it, and a worker of a 120 M GPT held 1710 MiB at its
// peak instead of 1277. Call once in a process that computes, after loading its data (whose
// big temporaries should go back to the kernel) and before the first step; a server does not
// (it would only keep pages it never reuses). A no-op where the C library is not glibc
// (macOS's allocator keeps freed regions by itself).
// Gives the memory the C library holds freed back to the system (glibc: malloc_trim; a
// no-op elsewhere): after a one-off computation (the start-up's check of the model), whose
// freed memory a step would otherwise find fragmented.
void giveBackFreedMemory();

constexpr std::size_t kKeptBlocksForTraining = std::size_t(32) << 20;
constexpr std::size_t kKeptBlocksForEvaluation = std::size_t(1) << 30;  // pseval's big batches, one model
void keepFreedMemoryForReuse(std::size_t largestKept);

// `bytes` (at least one) of fresh private pages, given back when it goes: they read as zeros
// and take memory only once written (what a buffer that is mostly never written needs).
// Throws std::bad_alloc when the system refuses them.
class FreshPages {
 public:
  explicit FreshPages(std::size_t bytes);
  ~FreshPages();
  FreshPages(const FreshPages&) = delete;
  FreshPages& operator=(const FreshPages&) = delete;
  char* data() const { return data_; }

 private:
  char* data_;
  std::size_t bytes_;
};

// Gives the whole pages within [begin, begin + bytes) of this process's private memory back
// to the system: their contents are undefined afterwards (zeros on Linux). Returns the bytes
// given back (0 where the system has no such call).
std::size_t releasePages(void* begin, std::size_t bytes);

// Copies `bytes` from `from` to `to` 4 MiB at a time, giving back `from`'s whole pages
// (releasePages) as they are copied, so that the source and its copy are never both whole in
// memory. `from`'s contents are undefined afterwards; the ranges must not overlap.
void moveBytes(void* to, void* from, std::size_t bytes);

// pipe(2) with both ends close-on-exec (Linux's pipe2(O_CLOEXEC); elsewhere pipe and
// fcntl: the caller must not fork from another thread in between). Returns false with errno.
bool closeOnExecPipe(int fds[2]);

// The flags for send(2) on the stream socket `fd` so that a peer that has gone makes it fail
// with EPIPE instead of raising SIGPIPE (which ends the process): Linux's MSG_NOSIGNAL; on
// macOS, which lacks it, SO_NOSIGPIPE is set on `fd` and the flags are 0.
int sendFlagsWithoutSigpipe(int fd);

// From now on, this process (every thread of it, and any process it starts) may not write, create, rename or remove a
// file, open a socket, run a program, or reach into another process: any such system call
// kills it with SIGSYS. Reading files, threads and memory stay allowed. Linux: a seccomp
// filter (no new privileges first); returns false where the system has no such filter
// (macOS: its sandbox_init profiles cannot say all of this at once), doing nothing.
bool forbidWritesSocketsAndPrograms();

// The address of the C symbol `name` in the loaded library `library` or the libraries it
// depends on (dlsym on its handle), or nullptr; `library` "" searches the whole process.
void* symbolAddress(const char* name, const std::string& library = "");

// The file of the loaded library that defines the C symbol `name`, its links resolved (Debian's
// alternatives make libblas.so.3 a chain of them), or "" when none does.
std::string libraryDefining(const char* name);

// The file of this process's executable (Linux: /proc/self/exe; macOS:
// _NSGetExecutablePath), its links resolved, or "" when the system does not say.
std::string executablePath();

// This host's name (gethostname), "localhost" when it has none.
std::string hostName();

// The host's physical memory in bytes (0 when unknown).
std::uint64_t physicalMemoryBytes();
// The memory this process's ranks may use, in bytes: the host's, or less where a memory
// cgroup (v1 or v2) of this process or of one above it sets a limit (Linux; elsewhere the
// host's). What the memory plan and --doctor measure a host by.
std::uint64_t memoryLimitBytes();
// How many processes the kernel's OOM killer ended in this process's memory cgroup so far
// (its memory.events' or memory.oom_control's oom_kill); -1 where the system does not say.
std::int64_t oomKills();
// How many ranks Open MPI started on this host (OMPI_COMM_WORLD_LOCAL_SIZE; 1 outside mpirun).
int ranksOnThisHost();

}  // namespace pstrain::portable
