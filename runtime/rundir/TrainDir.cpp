#include "runtime/rundir/AtomicFile.h"
#include "runtime/rundir/TrainDir.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>

#include "runtime/Errors.h"
#include "runtime/Portable.h"
#include "runtime/Stop.h"
#include "runtime/rundir/AtomicFile.h"
#include "runtime/rundir/RunFiles.h"

namespace pstrain::rundir {
namespace {

namespace fs = std::filesystem;

// A train dir that a start made and left unused: its lock, then the dir, if that is all
// it holds (anything else stays).
void removeUnused(const std::string& trainDir) {
  std::error_code ec;
  fs::remove(fs::path(trainDir) / kLock, ec);
  fs::remove(trainDir, ec);
}

// Who holds a lock, from its .lock's "host:pid" ("pid" alone: an earlier version's).
std::string lockHolder(const std::string& content) {
  const auto colon = content.rfind(':');
  if (colon == std::string::npos) return fmt::format("pid {}", content);
  return fmt::format("pid {} on {}", content.substr(colon + 1), content.substr(0, colon));
}

}  // namespace

TrainDir::TrainDir(const config::TrainConfig& cfg) : cfg_(cfg) {
  const fs::path dir(cfg.trainDir);
  std::error_code ec;
  if (cfg.dryRun && !fs::exists(dir, ec)) {
    // A dry run writes nothing: a probe directory in the nearest existing parent, removed
    // at once (permission bits alone do not tell: root, read-only mounts, pseudo file systems).
    fs::path existing = fs::absolute(dir, ec);
    while (!existing.empty() && !fs::exists(existing, ec)) existing = existing.parent_path();
    const fs::path probe = existing / fmt::format(".pstrain-dry-run-{}", ::getpid());
    if (!fs::create_directory(probe, ec) || ec) {
      throw ConfigError(fmt::format("{}: not writable: cannot create it in {} ({})", cfg.trainDir, existing.string(),
                                    ec ? ec.message() : "exists"));
    }
    fs::remove(probe, ec);
    state_ = "writable";
    return;
  }
  const bool made = !fs::exists(dir, ec);
  dir_.fd = openPrivateDirectory(cfg.trainDir);
  if (made) {
    // Made by this start: a start that fails before begin() (a refusal on any rank) leaves
    // no empty train dir behind, even when another rank's failure ends this process.
    made_ = true;
    setTerminationCleanup([trainDir = cfg_.trainDir] { removeUnused(trainDir); });
  }
  lock_.fd = ::openat(dir_.fd, kLock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (lock_.fd < 0) {
    throw ConfigError(fmt::format("{}: not writable: cannot open its .lock ({})", cfg.trainDir, std::strerror(errno)));
  }
  if (::flock(lock_.fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) {  // not held: this file system cannot lock (some network mounts)
      throw ConfigError(fmt::format("{}: cannot lock its .lock ({}); choose a --train-dir on a file system that "
                                    "supports flock", cfg.trainDir, std::strerror(errno)));
    }
    char holder[300] = {};
    (void)::pread(lock_.fd, holder, sizeof holder - 1, 0);
    const std::string who(holder);
    throw ConfigError(fmt::format("{}: another pstrain job is using it ({}); wait for it, or choose another "
                                  "--train-dir", cfg.trainDir, lockHolder(who.substr(0, who.find('\n')))));
  }
  // host:pid, only for the message of a job that finds the dir locked (a shared train dir
  // may be locked from another host).
  const std::string holder = portable::hostName() + ":" + std::to_string(::getpid()) + "\n";
  if (::ftruncate(lock_.fd, 0) == 0) (void)::pwrite(lock_.fd, holder.data(), holder.size(), 0);
  for (const char* aside : {kSetAside, kSettingAside}) {
    if (!fs::exists(dir / aside)) continue;
    throw ConfigError(fmt::format("{}/{} holds the files of a run that an interrupted start (--overwrite or "
                                  "--resume) set aside: move them back into {} to keep that run, or remove {}/{}",
                                  cfg.trainDir, aside, cfg.trainDir, cfg.trainDir, aside));
  }
  earlierRun_ = fs::exists(dir / kRunJson);
  if (earlierRun_ && !cfg.overwrite && !cfg.resume) {
    throw ConfigError(fmt::format(
        "{} already holds a run; --resume continues it, --overwrite replaces it, or choose another --train-dir",
        cfg.trainDir));
  }
  try {
    atomicWrite((dir / ".write-test").string(), "ok\n");
  } catch (const CheckpointError& e) {
    throw ConfigError(fmt::format("{}: not writable ({})", cfg.trainDir, e.what()));
  }
  fs::remove(dir / ".write-test", ec);
  state_ = !earlierRun_ ? "writable"
           : cfg.resume ? "writable; --resume continues the run it holds"
                        : "writable; holds an earlier run that --overwrite will replace once the new run has published "
                          "its first checkpoint";
}

TrainDir::~TrainDir() {
  setTerminationCleanup(nullptr);
  // A start that failed (a refusal thrown through here): the dir it made goes again. A run
  // that never begins on purpose (--probe writes probe.json) keeps it.
  if (made_ && !begun_ && std::uncaught_exceptions() > 0) removeUnused(cfg_.trainDir);
}

TrainDir::LockFile::~LockFile() {
  if (fd >= 0) ::close(fd);  // releases the flock
}

namespace {

// Moves the files `names` of `dir` that exist into kSetAside/, as one step: each into
// kSettingAside/ first, which becomes kSetAside/ by one rename once all are in. So
// kSetAside/ always holds a whole earlier run, and whatever else is in `dir` then is the new
// run's; a start killed half-way leaves kSettingAside/, whose files restoreSetAside() puts
// back without touching anything else. A rename that fails puts back what moved, then
// throws ConfigError.
void setAside(const fs::path& dir, const std::vector<std::string>& names) {
  const fs::path staging = dir / kSettingAside;
  std::error_code ec;
  bool any = false;
  for (const auto& name : names) {
    if (!fs::exists(dir / name)) continue;
    if (!any) fs::create_directories(staging, ec);
    any = true;
    fs::rename(dir / name, staging / name, ec);
    if (ec) {
      const std::string why = ec.message();
      restoreSetAside(dir.string(), false);
      throw ConfigError(fmt::format("{}: cannot set {} aside ({}); nothing was changed", dir.string(), name, why));
    }
  }
  if (!any) return;
  syncDirectory(staging.string());
  fs::rename(staging, dir / kSetAside, ec);
  if (ec) {
    const std::string why = ec.message();
    restoreSetAside(dir.string(), false);
    throw ConfigError(fmt::format("{}: cannot set the earlier run aside ({}); nothing was changed", dir.string(), why));
  }
  syncDirectory(dir.string());
}

}  // namespace

void TrainDir::begin() {
  const fs::path dir(cfg_.trainDir);
  std::error_code ec;
  begun_ = true;
  setTerminationCleanup(nullptr);  // the dir is the run's now
  if (earlierRun_ && cfg_.overwrite) {
    setAside(dir, runFiles(cfg_.trainDir));
  } else if (cfg_.resume) {
    setAside(dir, finalFiles());
    // Temporary files of a write that a killed job left behind.
    for (const auto& entry : fs::directory_iterator(dir / kCheckpoints, ec)) {
      if (entry.path().filename().string().find(".tmp") != std::string::npos) fs::remove(entry.path(), ec);
    }
  }
  ::close(openPrivateDirectory((dir / kCheckpoints).string()));
  // Killed by a signal before the first checkpoint: the earlier run's files go back.
  if (holdsSetAside(cfg_.trainDir)) {
    setTerminationCleanup([trainDir = cfg_.trainDir, wholeRun = earlierRun_ && cfg_.overwrite] {
      restoreSetAside(trainDir, wholeRun);
    });
  }
}

void TrainDir::restore() {
  setTerminationCleanup(nullptr);  // (waits for a stop signal's cleanup, which does the same)
  restoreSetAside(cfg_.trainDir, earlierRun_ && cfg_.overwrite);
}

void restoreSetAside(const std::string& trainDir, bool wholeRun) {
  const fs::path dir(trainDir), aside = dir / kSetAside, staging = dir / kSettingAside;
  std::error_code ec;
  // A set-aside that did not finish: the new run has written nothing yet, and the earlier
  // run's files are partly here, partly there. They go back; nothing is removed.
  if (fs::exists(staging)) {
    for (const auto& entry : fs::directory_iterator(staging, ec)) {
      const fs::path back = dir / entry.path().filename();
      if (!fs::exists(back)) fs::rename(entry.path(), back, ec);
    }
    fs::remove(staging, ec);
  }
  if (!fs::exists(aside)) return;
  // What the failed run wrote (its run.json, its event file...) goes: every run file now
  // in the dir is its, since --overwrite set all of the earlier run's aside.
  if (wholeRun) {
    for (const auto& name : runFiles(trainDir)) removeTree((dir / name).string());
  }
  for (const auto& entry : fs::directory_iterator(aside, ec)) {
    const fs::path back = dir / entry.path().filename();
    removeTree(back.string());  // what the failed run wrote in its place
    fs::rename(entry.path(), back, ec);
  }
  fs::remove(aside, ec);
}

bool holdsSetAside(const std::string& trainDir) {
  return fs::exists(fs::path(trainDir) / kSetAside) || fs::exists(fs::path(trainDir) / kSettingAside);
}

void discardSetAside(const std::string& trainDir) {
  setTerminationCleanup(nullptr);  // nothing to put back any more
  const fs::path aside = fs::path(trainDir) / kSetAside;
  if (fs::exists(aside)) removeTree(aside.string());
}

}  // namespace pstrain::rundir
