// Rank 0's hold on the train dir (runtime/rundir): one job at a time, no dir others can
// write, an earlier run kept until the new one has a checkpoint; and checkpoint names.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "runtime/Errors.h"
#include "runtime/Portable.h"
#include "runtime/config/TrainConfig.h"
#include "runtime/rundir/AtomicFile.h"
#include "runtime/rundir/RunFiles.h"
#include "runtime/rundir/TrainDir.h"
#include "tests/common/ScratchDir.h"

using namespace pstrain;
namespace fs = std::filesystem;

namespace {

class TrainDir : public ::testing::Test {
 protected:
  config::TrainConfig cfg() const {
    config::TrainConfig c;
    c.trainDir = (scratch.path() / "run").string();
    return c;
  }
  // An earlier run's files: run.json and a metrics line.
  void earlierRun() {
    fs::create_directories(scratch.path() / "run");
    std::ofstream(scratch.path() / "run" / rundir::kRunJson) << "{}\n";
    std::ofstream(scratch.path() / "run" / rundir::kMetrics) << "{\"step\":1}\n";
  }
  std::string refusal(const config::TrainConfig& c) {
    try {
      rundir::TrainDir dir(c);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  }
  testsupport::ScratchDir scratch{"traindir"};
};

}  // namespace

TEST_F(TrainDir, OneJobAtATime) {
  rundir::TrainDir first(cfg());
  EXPECT_EQ(first.state(), "writable");
  const std::string second = refusal(cfg());
  EXPECT_NE(second.find("another pstrain job is using it"), std::string::npos) << second;
  // Who holds it, as its .lock says: host and pid (a shared train dir may be locked elsewhere).
  EXPECT_NE(second.find("(pid " + std::to_string(::getpid()) + " on " + portable::hostName() + ")"), std::string::npos)
      << second;
}

TEST_F(TrainDir, RefusesADirOthersCanWrite) {
  fs::create_directories(scratch.path() / "run");
  ::chmod((scratch.path() / "run").c_str(), 0777);
  const std::string error = refusal(cfg());
  EXPECT_NE(error.find("other users can write it"), std::string::npos) << error;
}

// Whoever can write the train dir's parent can swap the train dir for another between
// pstrain's checks and its writes: refused, unless the parent is sticky (as /tmp is).
TEST_F(TrainDir, RefusesAParentOthersCanWriteUnlessSticky) {
  const fs::path shared = scratch.path() / "shared";
  fs::create_directories(shared);
  ::chmod(shared.c_str(), 0777);
  config::TrainConfig c = cfg();
  c.trainDir = (shared / "run").string();
  const std::string error = refusal(c);
  EXPECT_NE(error.find("its parent " + shared.string() + " can be written by other users"), std::string::npos)
      << error;
  ::chmod(shared.c_str(), 01777);
  EXPECT_EQ(refusal(c), "");
}

TEST_F(TrainDir, AnEarlierRunNeedsResumeOrOverwrite) {
  earlierRun();
  EXPECT_NE(refusal(cfg()).find("already holds a run"), std::string::npos);
  config::TrainConfig resume = cfg();
  resume.resume = true;
  EXPECT_EQ(refusal(resume), "");
}

TEST_F(TrainDir, OverwriteKeepsTheEarlierRunUntilTheFirstCheckpoint) {
  earlierRun();
  config::TrainConfig overwrite = cfg();
  overwrite.overwrite = true;
  const fs::path run = scratch.path() / "run";
  {
    rundir::TrainDir dir(overwrite);
    dir.begin();  // the earlier run's files go aside
    EXPECT_FALSE(fs::exists(run / rundir::kRunJson));
    EXPECT_TRUE(fs::exists(run / rundir::kSetAside / rundir::kMetrics));
    dir.restore();  // the new run failed before its first checkpoint: they come back
  }
  EXPECT_TRUE(fs::exists(run / rundir::kRunJson));
  EXPECT_FALSE(fs::exists(run / rundir::kSetAside));
  {
    rundir::TrainDir dir(overwrite);
    dir.begin();
    rundir::discardSetAside(run.string());  // a checkpoint of the new run: the earlier one goes
  }
  EXPECT_FALSE(fs::exists(run / rundir::kSetAside));
  EXPECT_FALSE(fs::exists(run / rundir::kMetrics));
}

// --overwrite killed between two renames of its set-aside (hardening IV, finding 4): the
// earlier run's files are partly in place, partly set aside. The next start refuses the dir
// and says where; putting back (pstrain-run does it with the whole-run flag) moves them all
// back and removes none of them (the old put-back deleted every run file still in place:
// the earlier run's own run.json, metrics.jsonl, trained_model.pt).
TEST_F(TrainDir, AnInterruptedSetAsideIsPutBackWithoutLosingAFile) {
  earlierRun();
  const fs::path run = scratch.path() / "run";
  std::ofstream(run / rundir::kTrainedModel) << "weights";
  fs::create_directories(run / rundir::kSettingAside);
  fs::rename(run / rundir::kMetrics, run / rundir::kSettingAside / rundir::kMetrics);  // the first rename, then a kill
  config::TrainConfig overwrite = cfg();
  overwrite.overwrite = true;
  EXPECT_NE(refusal(overwrite).find(".replacing holds the files of a run"), std::string::npos) << refusal(overwrite);
  EXPECT_TRUE(rundir::holdsSetAside(run.string()));
  rundir::restoreSetAside(run.string(), /*wholeRun=*/true);
  EXPECT_FALSE(rundir::holdsSetAside(run.string()));
  for (const char* name : {rundir::kRunJson, rundir::kMetrics, rundir::kTrainedModel}) {
    EXPECT_TRUE(fs::exists(run / name)) << name;
  }
  std::ifstream model(run / rundir::kTrainedModel);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(model), {}), "weights");
  // A whole set-aside moves every file in one step: .replaced/ then holds them all.
  {
    rundir::TrainDir dir(overwrite);
    dir.begin();
    EXPECT_FALSE(fs::exists(run / rundir::kSettingAside));
    for (const char* name : {rundir::kRunJson, rundir::kMetrics, rundir::kTrainedModel}) {
      EXPECT_TRUE(fs::exists(run / rundir::kSetAside / name)) << name;
    }
    dir.restore();
  }
  EXPECT_TRUE(fs::exists(run / rundir::kTrainedModel));
}

TEST_F(TrainDir, CheckpointNamesReadBack) {
  EXPECT_EQ(rundir::checkpointName(500), "step-00000500");
  EXPECT_EQ(rundir::checkpointStep("step-00000500.ok", ".ok"), 500);
  EXPECT_EQ(rundir::checkpointStep("step-123456789012.pt", ".pt"), 123456789012);
  EXPECT_FALSE(rundir::checkpointStep("step-0000050.ok", ".ok"));              // too few digits
  EXPECT_FALSE(rundir::checkpointStep("step-00000500.pt", ".ok"));             // another kind
  EXPECT_FALSE(rundir::checkpointStep("step-0000000000000000001.ok", ".ok"));  // 19 digits: not ours
  EXPECT_FALSE(rundir::checkpointStep("step-0000x500.ok", ".ok"));
}

// Run directories are 0700 whatever the umask, and checked on a descriptor that did not
// follow a symbolic link.
TEST_F(TrainDir, RunDirectoriesArePrivateAndNotSymbolicLinks) {
  const mode_t previous = ::umask(0);
  const fs::path made = scratch.path() / "new" / "run";
  ::close(rundir::openPrivateDirectory(made.string()));
  ::umask(previous);
  struct stat info;
  ASSERT_EQ(::stat(made.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat(made.parent_path().c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);  // the parents it created too
  fs::create_directory_symlink(made, scratch.path() / "link");
  try {
    ::close(rundir::openPrivateDirectory((scratch.path() / "link").string()));
    ADD_FAILURE() << "a symbolic link was followed";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("a symbolic link"), std::string::npos) << e.what();
  }
}
