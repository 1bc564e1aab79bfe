// The training configuration (runtime/config): the mode table, the flag table's fields,
// the fingerprint.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "runtime/Errors.h"
#include "runtime/config/Flags.h"
#include "runtime/config/Layout.h"
#include "runtime/config/Mode.h"
#include "runtime/config/RunPlan.h"
#include "runtime/config/TrainConfig.h"

using namespace pstrain;

TEST(Config, FingerprintFollowsSharedFieldsOnly) {
  config::RunPlan a, b;
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  b.threads = 7;  // host-local
  b.trainDir = "elsewhere";
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  b.lr = 0.02;
  EXPECT_NE(a.fingerprint(), b.fingerprint());
  EXPECT_EQ(a.fingerprint().size(), 16u);
  // --simulate-compute joins the fingerprint only when on: earlier runs keep theirs.
  config::RunPlan c = a;
  EXPECT_EQ(config::fingerprintFields(c).size(), config::fingerprintFields(a).size());
  c.simulateComputeMs = 100;
  EXPECT_NE(c.fingerprint(), a.fingerprint());
  EXPECT_EQ(config::fingerprintFields(c).back(),
            std::make_pair(std::string("simulate-compute"), config::canonicalNumber(100)));
}

// What start-up resolves lives in the RunPlan, beside the flags as given (issue 82): the
// flags keep the user's words, explicitFlags() writes the resolved values in, and the
// fingerprint of a plan is that of the flags that say it explicitly, so that a run and its
// --resume with the values spelled out are one training.
TEST(Config, RunPlanKeepsTheFlagsAsGiven) {
  const config::TrainConfig flags = config::parseTrainFlags({"--model", "nets/gpt.pt", "--dataset", "t.bin",
                                                             "--block-size", "8", "--memory", "auto"}).cfg;
  config::RunPlan plan(flags);
  EXPECT_EQ(plan.lossFunction(), "cross-entropy");  // auto, before the model is read: by its name
  EXPECT_EQ(plan.virtualShardCount(3), 3);
  EXPECT_FALSE(plan.leanMemory());                  // auto counts as fast until chosen
  plan.resolvedLoss = "model";  // the model's own (loss::lossForModel)
  plan.resolvedShards = 4;
  plan.memoryChosen = config::MemoryUse::Lean;
  EXPECT_EQ(plan.lossFunction(), "model");
  EXPECT_EQ(plan.virtualShardCount(3), 4);
  EXPECT_TRUE(plan.leanMemory());
  const config::TrainConfig& given = plan;
  EXPECT_EQ(given.loss, "auto");
  EXPECT_EQ(given.virtualShards, 0);
  EXPECT_EQ(given.memory, config::MemoryUse::Auto);
  EXPECT_EQ(config::commandLineOf(given), config::commandLineOf(flags));

  const config::TrainConfig spelled = config::parseTrainFlags({"--model", "nets/gpt.pt", "--dataset", "t.bin",
                                                               "--block-size", "8", "--loss", "model",
                                                               "--virtual-shards", "4"}).cfg;
  EXPECT_EQ(plan.fingerprint(), config::RunPlan(spelled).fingerprint());
  EXPECT_NE(plan.fingerprint(), config::RunPlan(flags).fingerprint());
  EXPECT_EQ(config::fingerprintFields(plan.explicitFlags()), config::fingerprintFields(spelled));
  EXPECT_EQ(config::agreedFields(plan), config::agreedFields(config::RunPlan(spelled)));
  // --memory lean as given is lean whatever auto would choose.
  config::RunPlan lean(config::parseTrainFlags({"--memory", "lean"}).cfg);
  EXPECT_TRUE(lean.leanMemory());
}

TEST(Config, CanonicalNumbersRoundTrip) {
  EXPECT_EQ(config::canonicalNumber(0.01), "0.01");
  EXPECT_EQ(config::canonicalNumber(1.5), "1.5");
  EXPECT_EQ(std::stod(config::canonicalNumber(0.1 + 0.2)), 0.1 + 0.2);
}

// A mode is known by its row or not at all: an unknown name is an error listing the names,
// never a fallback to another mode.
TEST(Config, UnknownModeIsAnError) {
  try {
    config::parseMode("bogus");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--mode 'bogus' is not one of: sync, backup, async, allreduce, gossip"),
              std::string::npos) << e.what();
  }
  EXPECT_THROW(config::parseTrainFlags({"--mode", "bogus"}), ConfigError);
  EXPECT_THROW(config::parseTrainFlags({"--mode", "Sync"}), ConfigError);  // names are exact
  for (const auto& mode : config::modes()) {
    EXPECT_EQ(config::parseMode(mode.name), mode.mode);
    EXPECT_EQ(config::parseTrainFlags({"--mode", mode.name}).cfg.mode, mode.mode);
  }
}

// What the roles, the cost model and pstrain-run read of each mode.
TEST(Config, ModeTableColumns) {
  using config::Mode;
  auto layout = [](Mode mode, int ranks, int servers) {
    config::TrainConfig c;
    c.mode = mode;
    c.servers = servers;
    return config::Layout(c, ranks);
  };
  EXPECT_EQ(layout(Mode::Sync, 3, 1).workers(), 2);
  EXPECT_EQ(layout(Mode::Sync, 6, 2).workers(), 4);
  EXPECT_EQ(layout(Mode::Gossip, 3, 1).workers(), 3);
  EXPECT_FALSE(layout(Mode::Backup, 3, 1).computes(0));
  EXPECT_TRUE(layout(Mode::Allreduce, 3, 1).computes(0));
  EXPECT_FALSE(layout(Mode::Sync, 4, 2).computes(1));
  EXPECT_EQ(layout(Mode::Sync, 6, 2).workerIndex(2), 0);
  EXPECT_EQ(layout(Mode::Sync, 6, 2).heldBy(1, 101), 51);
  EXPECT_EQ(layout(Mode::Sync, 6, 2).heldBy(2, 101), 101);
  EXPECT_EQ(layout(Mode::Sync, 6, 2).serverWords(), "2 parameter servers");
  EXPECT_EQ(layout(Mode::Sync, 3, 1).serverWords(), "1 parameter server");
  EXPECT_TRUE(layout(Mode::Sync, 6, 2).cutsWeights());
  EXPECT_FALSE(layout(Mode::Sync, 3, 1).cutsWeights());
  EXPECT_THROW(layout(Mode::Sync, 2, 2).check(), CollectiveConfigError);
  EXPECT_NO_THROW(layout(Mode::Sync, 3, 2).check());
  config::TrainConfig cfg;
  cfg.mode = Mode::Backup;
  EXPECT_EQ(cfg.batchesPerUpdate(4), 3);  // --aggregate 0: workers - 1
  cfg.aggregate = 2;
  EXPECT_EQ(cfg.batchesPerUpdate(4), 2);
  cfg.mode = Mode::Async;
  EXPECT_EQ(cfg.batchesPerUpdate(4), 1);
  EXPECT_EQ(cfg.updatesPerEpoch(10, 4), 40);  // every worker batch is an update
  cfg.mode = Mode::Allreduce;
  EXPECT_EQ(cfg.batchesPerUpdate(4), 4);
  EXPECT_EQ(cfg.updatesPerEpoch(10, 4), 10);
  for (const auto& mode : config::modes()) {
    EXPECT_STRNE(mode.plan, "") << mode.name;
    EXPECT_EQ(mode.peers(), layout(mode.mode, 5, 1).workers() == 5) << mode.name;
  }
}

// The fingerprints of runs made before the flag and mode tables (pstrain at d524ed7's
// flags, run.json of four jobs) are still what the tables make: --resume of such a run
// finds its configuration unchanged.
TEST(Config, FingerprintsOfEarlierRunsStay) {
  config::TrainConfig sync;
  sync.dataset = "synthetic";
  sync.syntheticSize = 500;
  sync.steps = 2;
  sync.virtualShards = 2;
  EXPECT_EQ(config::RunPlan(sync).fingerprint(), "feb438705865e016");
  // The same run with its virtual shards resolved at start-up, not given.
  config::RunPlan resolved{sync};
  resolved.virtualShards = 0;
  resolved.resolvedShards = 2;
  resolved.resolvedLoss = "nll";
  EXPECT_EQ(resolved.fingerprint(), "feb438705865e016");
  config::TrainConfig backup = config::parseTrainFlags({"--mode", "backup", "--aggregate", "2", "--model", "mlp",
                                                        "--dataset", "synthetic", "--synthetic-size", "500", "--steps",
                                                        "2", "--compress", "topk:0.01"}).cfg;
  backup.virtualShards = 3;
  EXPECT_EQ(config::RunPlan(backup).fingerprint(), "21191633fec344bd");
  config::TrainConfig gossip = config::parseTrainFlags({"--mode", "gossip", "--model", "mlp", "--dataset", "synthetic",
                                                        "--synthetic-size", "500", "--steps", "2", "--interpolation",
                                                        "constant:0.3", "--fetch-probability", "0.2"}).cfg;
  gossip.virtualShards = 3;
  EXPECT_EQ(config::RunPlan(gossip).fingerprint(), "4120d74ebf4c21ec");
  config::TrainConfig async = config::parseTrainFlags(
      {"--mode", "async", "--max-staleness", "2", "--model", "convnet", "--dataset", "synthetic", "--steps", "2",
       "--simulate-compute", "5", "--lr", "0.05", "--momentum", "0.5", "--nesterov", "--weight-decay", "1e-4",
       "--warmup-steps", "3", "--lr-decay", "cosine"}).cfg;
  async.virtualShards = 2;
  EXPECT_EQ(config::RunPlan(async).fingerprint(), "4ac8c908bf3cf688");
}

// The flag table's readings: a field the mode does not use reads "-"; the agreed fields add
// what ranks must share without it being the training's identity; every flag reaches
// run.json's config.
TEST(Config, FlagTableFields) {
  config::RunPlan cfg;
  const auto shared = config::fingerprintFields(cfg.explicitFlags());
  EXPECT_EQ(shared.front(), std::make_pair(std::string("mode"), std::string("sync")));
  auto field = [](const std::vector<std::pair<std::string, std::string>>& fields, const std::string& name) {
    for (const auto& [key, value] : fields) {
      if (key == name) return value;
    }
    return std::string("(absent)");
  };
  EXPECT_EQ(field(shared, "aggregate"), "-");
  EXPECT_EQ(field(shared, "loss"), "nll");  // auto, resolved for a zoo model
  EXPECT_EQ(field(shared, "threads"), "(absent)");
  EXPECT_EQ(field(config::agreedFields(cfg), "resume"), "false");
  EXPECT_EQ(field(config::agreedFields(cfg), "threads"), "(absent)");
  EXPECT_EQ(field(config::allFields(cfg), "threads"), "0");
  cfg.mode = config::Mode::Backup;
  EXPECT_EQ(field(config::fingerprintFields(cfg), "aggregate"), "0");
  EXPECT_EQ(field(config::fingerprintFields(cfg), "loss"), "auto");  // the flag as given
}

// A flag that may stand alone takes its value after a space too; bare, it is "on".
TEST(Config, FlagsThatStandAloneTakeAValueAfterASpace) {
  auto cfg = config::parseTrainFlags({"--mode", "diloco", "--balance", "off", "--overlap-rounds", "on"}).cfg;
  EXPECT_EQ(cfg.balanceFlag, config::Switch::Off);
  EXPECT_EQ(cfg.overlapRoundsFlag, config::Switch::On);
  cfg = config::parseTrainFlags({"--mode", "diloco", "--balance", "--overlap-rounds=off"}).cfg;
  EXPECT_EQ(cfg.balanceFlag, config::Switch::On);
  EXPECT_EQ(cfg.overlapRoundsFlag, config::Switch::Off);
  EXPECT_THROW(config::parseTrainFlags({"--mode", "diloco", "--balance", "sometimes"}), ConfigError);
}

// --fragments (streamed rounds) applies to overlapped rounds through one server; anything
// else is refused, naming the flag.
TEST(Config, FragmentsStreamOverlappedRoundsThroughOneServer) {
  auto refusal = [](std::vector<std::string> args) {
    try {
      config::parseTrainFlags(args).cfg.validate();
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(refusal({"--mode", "diloco", "--fragments", "4"}), "");
  EXPECT_EQ(config::parseTrainFlags({"--mode", "diloco", "--fragments", "4"}).cfg.fixedFragments(), 4);
  EXPECT_EQ(config::parseTrainFlags({"--mode", "diloco"}).cfg.fixedFragments(), 0);  // auto
  EXPECT_EQ(refusal({"--mode", "diloco", "--servers", "2"}), "");  // auto: 1 there
  EXPECT_EQ(refusal({"--mode", "diloco", "--overlap-rounds", "off"}), "");
  for (const char* bad : {"0", "65", "2.5", "two"}) {
    EXPECT_NE(refusal({"--mode", "diloco", "--fragments", bad}).find("--fragments must be auto or a whole number in [1, 64]"),
              std::string::npos) << bad;
  }
  EXPECT_NE(refusal({"--mode", "sync", "--fragments", "2"}).find("--mode diloco or localsgd only"), std::string::npos);
  EXPECT_NE(refusal({"--mode", "diloco", "--fragments", "2", "--overlap-rounds", "off"}).find("--overlap-rounds off refuses"),
            std::string::npos);
  EXPECT_NE(refusal({"--mode", "diloco", "--fragments", "2", "--servers", "2"}).find("--servers 2 refuses it"),
            std::string::npos);
}

// --config FILE under the command line's flags, torch-free (pstrain-run reads it so).
TEST(Config, ConfigFileUnderTheCommandLine) {
  const std::string path = ::testing::TempDir() + "pstrain-test.conf";
  {
    std::ofstream out(path);
    out << "# a run\nmode = allreduce\nlr = 0.05   # overridden below\ntrain-dir = /tmp/somewhere\n";
  }
  const auto flags = config::parseTrainFlags({"--config", path, "--lr", "0.03"});
  EXPECT_EQ(flags.cfg.mode, config::Mode::Allreduce);
  EXPECT_DOUBLE_EQ(flags.cfg.lr, 0.03);
  EXPECT_EQ(flags.cfg.trainDir, "/tmp/somewhere");
  {
    std::ofstream out(path);
    out << "colour = blue\n";
  }
  EXPECT_THROW(config::parseTrainFlags({"--config", path}), ConfigError);
  std::remove(path.c_str());
}

// pstrain-run launches jobs with commandLineOf(the parsed flags): parsing it gives every
// field back, a --config file's and the spellings "--flag=true" included; odd values too.
TEST(Config, CommandLineOfGivesTheConfigBack) {
  const std::string path = ::testing::TempDir() + "pstrain-relaunch.conf";
  {
    std::ofstream out(path);
    out << "overwrite = true\nmode = async\nmax-staleness = 3\ntrain-dir = /tmp/a dir with spaces\n";
  }
  const config::TrainConfig parsed =
      config::parseTrainFlags({"--config", path, "--lr=0.1234567890123", "--straggle", "1:20", "--model", "mlp",
                               "--weight-decay", "1e-300", "--seed", "18446744073709551615"}).cfg;
  EXPECT_TRUE(parsed.overwrite);
  const config::TrainConfig again = config::parseTrainFlags(config::commandLineOf(parsed)).cfg;
  EXPECT_EQ(config::allFields(config::RunPlan(again)), config::allFields(config::RunPlan(parsed)));
  EXPECT_TRUE(again.overwrite);
  EXPECT_EQ(again.trainDir, "/tmp/a dir with spaces");
  EXPECT_EQ(again.lr, parsed.lr);
  config::TrainConfig resumed = parsed;
  resumed.overwrite = false;
  resumed.resume = true;
  const auto args = config::commandLineOf(resumed);
  EXPECT_EQ(std::count(args.begin(), args.end(), "--overwrite=false"), 1);
  EXPECT_EQ(std::count(args.begin(), args.end(), "--resume=true"), 1);
  EXPECT_NO_THROW(config::parseTrainFlags(args));  // not both
  std::remove(path.c_str());
}

// Config files and command lines that used to be misread or said the wrong thing.
TEST(Config, ConfigFilesSayWhatIsWrong) {
  const std::string path = ::testing::TempDir() + "pstrain-odd.conf";
  auto refusal = [&](const std::string& text, std::vector<std::string> more = {}) {
    std::ofstream(path, std::ios::binary) << text;
    std::vector<std::string> args = {"--config", path};
    args.insert(args.end(), more.begin(), more.end());
    try {
      config::parseTrainFlags(args);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(refusal("lr = 0.1\nsteps = 5\nlr = 0.2\n").find(":3: 'lr' again (line 1 sets it too)"), std::string::npos);
  EXPECT_NE(refusal("overwrite = yes\n").find("--overwrite yes: true or false"), std::string::npos);
  EXPECT_NE(refusal(std::string("lr = 0.1\nsteps\0 = 5\n", 20)).find(":2: a NUL byte"), std::string::npos);
  // '#' starts a comment only at the start of a line or after a blank.
  std::ofstream(path) << "train-dir = /tmp/run#1   # the first\n# all of this line\n";
  EXPECT_EQ(config::parseTrainFlags({"--config", path}).cfg.trainDir, "/tmp/run#1");
  // A flag given twice on the command line: the last counts, and the warning says so.
  const auto twice = config::parseTrainFlags({"--lr", "0.1", "--steps=5", "--lr=0.3"});
  EXPECT_DOUBLE_EQ(twice.cfg.lr, 0.3);
  ASSERT_EQ(twice.warnings.size(), 1u);
  EXPECT_EQ(twice.warnings[0], "--lr given 2 times: the last one counts");
  // The config file's value under the command line's is no repetition.
  std::ofstream(path) << "lr = 0.5\n";
  EXPECT_TRUE(config::parseTrainFlags({"--config", path, "--lr", "0.2"}).warnings.empty());
  std::remove(path.c_str());
}
