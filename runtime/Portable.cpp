#include "runtime/Portable.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <new>
#include <sstream>
#include <string>

#if defined(__linux__)
#include <dirent.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <cstddef>
#include <cstdint>
#include <vector>
#elif defined(__APPLE__)
#include <libproc.h>
#include <sys/sysctl.h>

#include <algorithm>
#include <vector>
#endif
#if defined(__GLIBC__)
#include <malloc.h>
#elif defined(__APPLE__)
#include <mach-o/dyld.h>
#endif

#include "runtime/Parts.h"

namespace pstrain::portable {

#if defined(__linux__)
namespace {

// Field `index` (1-based, as proc(5) counts) of /proc/PID/stat, or "". The command name
// (field 2) may hold spaces and parentheses: fields are counted from its closing one.
std::string statField(long pid, int index) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return "";
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  for (int at = 3; fields >> field; ++at) {
    if (at == index) return field;
  }
  return "";
}

}  // namespace

std::optional<double> processStartSeconds(long pid) {
  const std::string ticks = statField(pid, 22);  // clock ticks since boot
  if (ticks.empty()) return std::nullopt;
  return std::strtod(ticks.c_str(), nullptr) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

std::vector<long> childProcesses(long pid) {
  std::vector<long> children;
  DIR* proc = ::opendir("/proc");
  if (!proc) return children;
  while (const dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    const long candidate = std::strtol(entry->d_name, &end, 10);
    if (candidate > 0 && *end == '\0' && statField(candidate, 4) == std::to_string(pid)) children.push_back(candidate);
  }
  ::closedir(proc);
  return children;
}

double startClockSeconds() {
  timespec now{};
  ::clock_gettime(CLOCK_BOOTTIME, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}
#elif defined(__APPLE__)
std::optional<double> processStartSeconds(long pid) {
  int query[4] = {CTL_KERN, KERN_PROC, KERN_PROC_PID, static_cast<int>(pid)};
  kinfo_proc info{};
  std::size_t size = sizeof info;
  if (::sysctl(query, 4, &info, &size, nullptr, 0) != 0 || size == 0) return std::nullopt;
  const timeval& started = info.kp_proc.p_starttime;
  return static_cast<double>(started.tv_sec) + static_cast<double>(started.tv_usec) * 1e-6;
}

std::vector<long> childProcesses(long pid) {
  std::vector<pid_t> pids(4096);
  const int found = ::proc_listchildpids(static_cast<pid_t>(pid), pids.data(), static_cast<int>(pids.size() * sizeof(pid_t)));
  std::vector<long> children;
  for (int i = 0; i < std::min(found, static_cast<int>(pids.size())); ++i) {
    if (pids[i] > 0) children.push_back(pids[i]);
  }
  return children;
}

double startClockSeconds() {
  timeval now{};
  ::gettimeofday(&now, nullptr);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_usec) * 1e-6;
}
#else
// Other systems: no start times (run.json then lacks the "launch" and "load" phases), no
// list of children.
std::optional<double> processStartSeconds(long) { return std::nullopt; }
double startClockSeconds() { return 0; }
std::vector<long> childProcesses(long) { return {}; }
#endif

double residentMib() {
#if defined(__linux__)
  std::ifstream statm("/proc/self/statm");
  std::uint64_t pages = 0, resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)) / (1 << 20);
#elif defined(__APPLE__)
  proc_taskinfo info{};
  const int size = ::proc_pidinfo(::getpid(), PROC_PIDTASKINFO, 0, &info, sizeof info);
  return size == static_cast<int>(sizeof info) ? static_cast<double>(info.pti_resident_size) / (1 << 20) : 0;
#else
  return 0;
#endif
}

double peakRssMib() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
#if defined(__APPLE__)
  return static_cast<double>(usage.ru_maxrss) / (1 << 20);  // bytes
#else
  return static_cast<double>(usage.ru_maxrss) / 1024;  // KiB (Linux, the BSDs)
#endif
}

bool syncToDisk(int fd) {
#if defined(__APPLE__)
  if (::fcntl(fd, F_FULLFSYNC) == 0) return true;
  if (errno != ENOTSUP && errno != EINVAL) return false;  // refused by the file system: fsync is what it offers
#endif
  return ::fsync(fd) == 0;
}

FreshPages::FreshPages(std::size_t bytes) : bytes_(std::max<std::size_t>(bytes, 1)) {
  void* base = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) throw std::bad_alloc();
  data_ = static_cast<char*>(base);
}

FreshPages::~FreshPages() { ::munmap(data_, bytes_); }

std::size_t releasePages(void* begin, std::size_t bytes) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto from = (reinterpret_cast<std::uintptr_t>(begin) + page - 1) / page * page;
  const auto to = (reinterpret_cast<std::uintptr_t>(begin) + bytes) / page * page;
  if (to <= from) return 0;
#if defined(__APPLE__)
  const int advice = MADV_FREE;  // macOS takes the pages back when it needs them
#else
  const int advice = MADV_DONTNEED;
#endif
  return ::madvise(reinterpret_cast<void*>(from), to - from, advice) == 0 ? to - from : 0;
}

void moveBytes(void* to, void* from, std::size_t bytes) {
  constexpr std::size_t kChunk = kPartBytes;
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  char* source = static_cast<char*>(from);
  char* given = source;  // what lies below went back (but a partial first page)
  for (std::size_t done = 0; done < bytes;) {
    const std::size_t n = std::min(kChunk, bytes - done);
    std::memcpy(static_cast<char*>(to) + done, source + done, n);
    done += n;
    char* copied = reinterpret_cast<char*>(reinterpret_cast<std::uintptr_t>(source + done) / page * page);
    if (copied <= given) continue;
    releasePages(given, static_cast<std::size_t>(copied - given));
    given = copied;
  }
}

void giveBackFreedMemory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#else
  // Other C libraries (macOS's) give back what they see fit.
#endif
}

void keepFreedMemoryForReuse(std::size_t largestKept) {
#if defined(__GLIBC__)
  // Blocks below `largestKept` come from the heap, and freed memory at its top goes back to
  // the kernel only past 1 GiB: a step's temporaries (im2col buffers of a conv layer, 78 MB
  // for LeNet's first at batch 1000) are then faulted in once, not every step. (Above
  // 32 MiB glibc's default always maps and unmaps: pseval's batch of 1000 took 4x longer.)
  // A glibc that refuses so high a threshold (its manual's limit is 32 MiB) gets that limit.
  constexpr int kKeep = 1 << 30;
  const int threshold = static_cast<int>(std::min<std::size_t>(largestKept, kKeep));
  if (mallopt(M_MMAP_THRESHOLD, threshold) == 0) mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, kKeep);
#else
  // Other C libraries (macOS's) have no such knobs: their allocators keep what they see fit.
#endif
}

bool closeOnExecPipe(int fds[2]) {
#if defined(__linux__)
  return ::pipe2(fds, O_CLOEXEC) == 0;
#else
  if (::pipe(fds) != 0) return false;
  for (int i = 0; i < 2; ++i) {
    if (::fcntl(fds[i], F_SETFD, FD_CLOEXEC) != 0) {
      const int error = errno;
      ::close(fds[0]);
      ::close(fds[1]);
      errno = error;
      return false;
    }
  }
  return true;
#endif
}

void* symbolAddress(const char* name, const std::string& library) {
  if (library.empty()) return ::dlsym(RTLD_DEFAULT, name);
  void* handle = ::dlopen(library.c_str(), RTLD_LAZY | RTLD_NOLOAD);  // only if loaded already
  if (!handle) return nullptr;
  void* address = ::dlsym(handle, name);
  ::dlclose(handle);  // the library stays: the process loaded it before
  return address;
}

std::string libraryDefining(const char* name) {
  Dl_info info{};
  void* address = symbolAddress(name);
  if (!address || !::dladdr(address, &info) || !info.dli_fname) return "";
  char resolved[PATH_MAX];
  return ::realpath(info.dli_fname, resolved) ? resolved : info.dli_fname;
}

std::string executablePath() {
#if defined(__linux__)
  const char* link = "/proc/self/exe";
#elif defined(__APPLE__)
  char link[PATH_MAX] = {};
  std::uint32_t size = sizeof link;
  if (::_NSGetExecutablePath(link, &size) != 0) return "";
#else
  const char* link = "";
#endif
  char resolved[PATH_MAX] = {};
  return *link && ::realpath(link, resolved) ? resolved : "";
}

std::string hostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || !name[0]) return "localhost";
  return name;
}

std::uint64_t physicalMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), pageSize = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && pageSize > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(pageSize) : 0;
}

#if defined(__linux__)
namespace {

// This process's cgroup folders of the memory controller, from its own up to the root's:
// v2 (the unified hierarchy, "0::/path") under /sys/fs/cgroup, v1 ("N:...memory...:/path")
// under /sys/fs/cgroup/memory. A container sees its own cgroup as "/": the root's folder.
std::vector<std::string> memoryCgroups() {
  std::ifstream in("/proc/self/cgroup");
  std::vector<std::string> folders;
  for (std::string line; std::getline(in, line);) {
    const auto first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    std::string root;
    if (controllers.empty() && line.compare(0, first, "0") == 0) {
      root = "/sys/fs/cgroup";
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      root = "/sys/fs/cgroup/memory";
    } else {
      continue;
    }
    for (std::string path = line.substr(second + 1);; path = path.substr(0, path.rfind('/'))) {
      folders.push_back(root + (path == "/" ? "" : path));
      if (path.empty() || path == "/") break;
    }
  }
  return folders;
}

// The first number of `file` (or of its line that starts with `key `), or -1.
std::int64_t numberIn(const std::string& file, const std::string& key = "") {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (!key.empty() && line.compare(0, key.size() + 1, key + " ") != 0) continue;
    const std::string text = key.empty() ? line : line.substr(key.size() + 1);
    if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return -1;  // "max": none
    return static_cast<std::int64_t>(std::min<unsigned long long>(std::strtoull(text.c_str(), nullptr, 10), INT64_MAX));
  }
  return -1;
}

}  // namespace

std::uint64_t memoryLimitBytes() {
  std::uint64_t limit = physicalMemoryBytes();
  for (const std::string& folder : memoryCgroups()) {
    for (const char* file : {"/memory.max", "/memory.limit_in_bytes"}) {  // v2, v1 (unlimited: a huge number)
      const std::int64_t bytes = numberIn(folder + file);
      if (bytes > 0 && (limit == 0 || static_cast<std::uint64_t>(bytes) < limit)) limit = static_cast<std::uint64_t>(bytes);
    }
  }
  return limit;
}

std::int64_t oomKills() {
  const std::vector<std::string> folders = memoryCgroups();
  if (folders.empty()) return -1;
  std::int64_t kills = numberIn(folders.front() + "/memory.events", "oom_kill");
  if (kills < 0) kills = numberIn(folders.front() + "/memory.oom_control", "oom_kill");
  return kills;
}
#else
std::uint64_t memoryLimitBytes() { return physicalMemoryBytes(); }
std::int64_t oomKills() { return -1; }
#endif

int ranksOnThisHost() {
  const char* text = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const long ranks = text ? std::strtol(text, nullptr, 10) : 1;
  return ranks >= 1 && ranks <= (1 << 20) ? static_cast<int>(ranks) : 1;
}

#if defined(__linux__)
int sendFlagsWithoutSigpipe(int) { return MSG_NOSIGNAL; }
#else
int sendFlagsWithoutSigpipe(int fd) {
  const int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &on, sizeof on);
  return 0;
}
#endif

#if defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__))
bool forbidWritesSocketsAndPrograms() {
#if defined(__x86_64__)
  constexpr std::uint32_t kArch = AUDIT_ARCH_X86_64;
#else
  constexpr std::uint32_t kArch = AUDIT_ARCH_AARCH64;
#endif
  // Every call that changes the file system, reaches another machine or process, or runs a
  // program (the legacy x86-64 names where they exist; aarch64 has only the *at forms).
  static const int kForbidden[] = {
#if defined(__x86_64__)
      __NR_creat, __NR_unlink, __NR_rename, __NR_mkdir, __NR_rmdir, __NR_link, __NR_symlink, __NR_chmod,
      __NR_chown, __NR_lchown, __NR_mknod, __NR_truncate,
#endif
      __NR_unlinkat, __NR_renameat, __NR_renameat2, __NR_mkdirat, __NR_linkat, __NR_symlinkat, __NR_fchmodat,
      __NR_fchownat, __NR_mknodat, __NR_socket, __NR_socketpair, __NR_execve, __NR_execveat, __NR_ptrace,
      __NR_process_vm_writev, __NR_fchmod, __NR_fchown, __NR_ftruncate};
  constexpr std::uint32_t kWriting = O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND;
  const auto load = [](std::uint32_t offset) {
    return sock_filter{static_cast<std::uint16_t>(BPF_LD | BPF_W | BPF_ABS), 0, 0, offset};
  };
  const auto jumpIfEqual = [](std::uint32_t value, std::uint8_t skipIfTrue, std::uint8_t skipIfFalse) {
    return sock_filter{static_cast<std::uint16_t>(BPF_JMP | BPF_JEQ | BPF_K), skipIfTrue, skipIfFalse, value};
  };
  const auto answer = [](std::uint32_t action) { return sock_filter{static_cast<std::uint16_t>(BPF_RET | BPF_K), 0, 0, action}; };
  const std::uint32_t nrAt = offsetof(seccomp_data, nr), archAt = offsetof(seccomp_data, arch);
  const auto argAt = [](int i) { return static_cast<std::uint32_t>(offsetof(seccomp_data, args) + 8 * i); };  // low word
  std::vector<sock_filter> program = {load(archAt), jumpIfEqual(kArch, 1, 0), answer(SECCOMP_RET_KILL_PROCESS),
                                      load(nrAt)};
#if defined(__x86_64__)
  // x32 system calls (the same numbers with bit 30 set) would slip past the numbers below.
  program.push_back({static_cast<std::uint16_t>(BPF_JMP | BPF_JGE | BPF_K), 0, 1, 0x40000000u});
  program.push_back(answer(SECCOMP_RET_KILL_PROCESS));
#endif
  for (int nr : kForbidden) {
    program.push_back(jumpIfEqual(static_cast<std::uint32_t>(nr), 0, 1));
    program.push_back(answer(SECCOMP_RET_KILL_PROCESS));
  }
  // openat2's flags are behind a pointer: it is refused (ENOSYS), and callers fall back on openat.
  program.push_back(jumpIfEqual(__NR_openat2, 0, 1));
  program.push_back(answer(SECCOMP_RET_ERRNO | ENOSYS));
  // open(2) and openat(2) for writing: the flags' word.
  const auto refuseWriting = [&](int nr, int flagsArg) {
    program.push_back(jumpIfEqual(static_cast<std::uint32_t>(nr), 0, 5));
    program.push_back(load(argAt(flagsArg)));
    program.push_back({static_cast<std::uint16_t>(BPF_ALU | BPF_AND | BPF_K), 0, 0, kWriting});
    program.push_back(jumpIfEqual(0, 1, 0));
    program.push_back(answer(SECCOMP_RET_KILL_PROCESS));
    program.push_back(answer(SECCOMP_RET_ALLOW));
  };
#if defined(__x86_64__)
  refuseWriting(__NR_open, 1);
  program.push_back(load(nrAt));  // (refuseWriting's load replaced the number only where it matched)
#endif
  refuseWriting(__NR_openat, 2);
  program.push_back(answer(SECCOMP_RET_ALLOW));
  const sock_fprog filter{static_cast<unsigned short>(program.size()), program.data()};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
  // Every thread of the process at once (TSYNC): a thread started earlier (libtorch's pools)
  // is not left outside. A kernel without TSYNC (before 3.17): the calling thread.
  return ::syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &filter) == 0 ||
         ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &filter) == 0;
}
#else
bool forbidWritesSocketsAndPrograms() { return false; }
#endif

}  // namespace pstrain::portable
