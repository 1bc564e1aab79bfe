#pragma once
// Rank 0's hold on the train dir (DESIGN.md, "Files a run leaves"): one job at a time, no
// dir that other users can write, and an earlier run that survives a failed start. With
// --overwrite (and --resume, for the final weights it writes again) the earlier run's
// files are set aside in <train-dir>/.replaced/ (as one step: see setAside in TrainDir.cpp)
// only once every start-up check has passed,
// and deleted only once the new run has published its first checkpoint; a failure before
// that puts them back, also on a stop signal (runtime/Stop.h); if the process was
// killed outright, they stay there and the next start says so (pstrain-run puts them back).
#include <string>

#include "runtime/config/TrainConfig.h"

namespace pstrain::rundir {

class TrainDir {
 public:
  // Checks `cfg.trainDir` (created if missing; removed again if the start fails before
  // begin(): an exception through this object, or a stop signal) and locks it (flock on .lock, held
  // while this object lives): refuses a dir another job holds, one that other users can write,
  // one that holds an earlier run (without --overwrite or --resume) or the files an
  // interrupted start set aside. Touches no file of an earlier run. Throws ConfigError.
  explicit TrainDir(const config::TrainConfig& cfg);
  ~TrainDir();
  TrainDir(const TrainDir&) = delete;
  TrainDir& operator=(const TrainDir&) = delete;

  // What a dry run reports: "writable", and what --overwrite or --resume will do.
  std::string state() const { return state_; }
  // After the start-up checks: sets the earlier run's files aside, creates ckpt/ and proves
  // it writable.
  void begin();
  // The run failed before its first checkpoint: the earlier run's files go back.
  void restore();

 private:
  config::TrainConfig cfg_;
  // The open .lock whose flock is the job's hold; closed (released) with the object, and
  // also when the constructor refuses the dir after taking it.
  struct LockFile {
    int fd = -1;
    ~LockFile();
  } lock_, dir_;  // dir_: the train dir itself (openPrivateDirectory), .lock opened in it
  bool earlierRun_ = false;
  bool made_ = false;   // this start made the dir
  bool begun_ = false;  // begin() ran: the dir is the run's
  std::string state_;
};

// After a checkpoint of the new run is published: the files set aside go for good.
void discardSetAside(const std::string& trainDir);
// A run that failed before its first checkpoint: the files set aside in `trainDir` go back
// in place of what the run wrote; with `wholeRun` (--overwrite set every run file aside)
// every run file the failed run wrote goes first. A set-aside that was interrupted half-way
// (kSettingAside/) is undone without removing anything: the run had written nothing yet.
// Nothing set aside: nothing happens. TrainDir::restore(), and pstrain-run for a launch
// that was killed before it could.
void restoreSetAside(const std::string& trainDir, bool wholeRun);
// Whether `trainDir` holds files that a start set aside, whole or half-way.
bool holdsSetAside(const std::string& trainDir);

}  // namespace pstrain::rundir
