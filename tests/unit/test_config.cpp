#include <gtest/gtest.h>

#include "launcher/Cli.h"
#include "launcher/Elastic.h"
#include "runtime/Errors.h"
#include "runtime/Portable.h"
#include "runtime/config/TrainConfig.h"
#include "runtime/metrics/Json.h"
#include "runtime/metrics/Progress.h"
#include "runtime/metrics/Startup.h"
#include "runtime/protocol/StepProtocol.h"

#include <unistd.h>

#include <limits>

using namespace pstrain;

namespace {

launcher::TrainCommand parse(std::vector<std::string> args) {
  args.insert(args.begin(), "pstrain");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return launcher::parseTrainCommand(static_cast<int>(argv.size()), argv.data());
}

std::string parseError(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Cli, ParsesEveryTrainingFlag) {
  auto cmd = parse({"--model", "mlp", "--dataset", "synthetic", "--batch-size", "32", "--lr", "0.05",
                    "--lr-scaling", "none", "--warmup-steps", "10", "--lr-decay", "cosine", "--momentum", "0.5", "--nesterov",
                    "--weight-decay", "0.001", "--steps", "7", "--train-dir", "x", "--checkpoint-every",
                    "3", "--log-every", "2", "--seed", "9", "--threads", "2", "--device", "cpu"});
  const auto& c = cmd.cfg;
  EXPECT_EQ(c.model, "mlp");
  EXPECT_EQ(c.batchSize, 32);
  EXPECT_DOUBLE_EQ(c.lr, 0.05);
  EXPECT_EQ(c.lrScaling, "none");
  EXPECT_EQ(c.lrDecay, "cosine");
  EXPECT_TRUE(c.nesterov);
  EXPECT_EQ(c.steps, 7);
  EXPECT_EQ(c.seed, 9u);
  EXPECT_EQ(c.threads, 2);
}

TEST(Cli, RejectsNonsenseWithTheFlagNamed) {
  EXPECT_NE(parseError({"--model", "resnet9000"}).find("unknown model 'resnet9000'"), std::string::npos);
  EXPECT_NE(parseError({"--batch-size", "0"}).find("--batch-size"), std::string::npos);
  EXPECT_NE(parseError({"--lr", "-1"}).find("--lr"), std::string::npos);
  EXPECT_NE(parseError({"--dataset", "imagenet"}).find("unknown dataset 'imagenet'"), std::string::npos);
  EXPECT_NE(parseError({"--model", "resnet20"}).find("--model resnet20 takes 3x32x32 images but --dataset fashion-mnist has 1x28x28"),
            std::string::npos);
  EXPECT_EQ(parseError({"--model", "resnet20", "--dataset", "cifar10"}), "");
  EXPECT_NE(parseError({"--lr", "abc"}).find("abc"), std::string::npos);
  EXPECT_NE(parseError({"--no-such-flag"}).find("no-such-flag"), std::string::npos);
  EXPECT_NE(parseError({"stray"}).find("stray"), std::string::npos);
  EXPECT_NE(parseError({"--nesterov", "--momentum", "0"}).find("--nesterov"), std::string::npos);
}

TEST(Cli, HelpListsEveryFlagWithItsDefault) {
  auto cmd = parse({"--help"});
  for (const char* flag : {"--model", "--dataset", "--data-dir", "--batch-size", "--lr", "--lr-scaling",
                           "--warmup-steps", "--momentum", "--nesterov", "--weight-decay", "--steps",
                           "--epochs", "--train-dir", "--checkpoint-every", "--log-every", "--seed",
                           "--threads", "--device"}) {
    EXPECT_NE(cmd.helpText.find(flag), std::string::npos) << flag;
  }
  EXPECT_NE(cmd.helpText.find("(default: lenet)"), std::string::npos);
}

TEST(Config, FingerprintFollowsSharedFieldsOnly) {
  config::TrainConfig a, b;
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  b.threads = 7;  // host-local
  b.trainDir = "elsewhere";
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  b.lr = 0.02;
  EXPECT_NE(a.fingerprint(), b.fingerprint());
  EXPECT_EQ(a.fingerprint().size(), 16u);
  // --simulate-compute joins the fingerprint only when on: earlier runs keep theirs.
  config::TrainConfig c = a;
  EXPECT_EQ(c.sharedFields().size(), a.sharedFields().size());
  c.simulateComputeMs = 100;
  EXPECT_NE(c.fingerprint(), a.fingerprint());
  EXPECT_EQ(c.sharedFields().back(), std::make_pair(std::string("simulate-compute"), config::canonicalNumber(100)));
}

TEST(Config, CanonicalNumbersRoundTrip) {
  EXPECT_EQ(config::canonicalNumber(0.01), "0.01");
  EXPECT_EQ(config::canonicalNumber(1.5), "1.5");
  EXPECT_EQ(std::stod(config::canonicalNumber(0.1 + 0.2)), 0.1 + 0.2);
}

TEST(Metrics, JsonEscapesAndNulls) {
  metrics::JsonObject o;
  o.add("s", "a\"b\n").add("x", std::numeric_limits<double>::infinity()).add("n", std::int64_t(3));
  EXPECT_EQ(o.str(), R"({"s":"a\"b\n","x":null,"n":3})");
}

TEST(Metrics, ProgressLine) {
  metrics::StepProgress p;
  p.step = 50;
  p.total = 100;
  p.loss = 0.5;
  p.lr = 0.02;
  p.samplesPerSecond = 1000;
  p.elapsedSeconds = 30;
  std::string line = metrics::progressLine(p);
  EXPECT_NE(line.find("step  50/100"), std::string::npos) << line;
  EXPECT_NE(line.find("ETA 0:30"), std::string::npos) << line;
  EXPECT_EQ(metrics::formatDuration(3725), "1:02:05");
}

// Every number a run takes is bounded and finite, with the flag named (no overflowing cast
// of a huge --timeout, no epochs x steps that wraps negative, no NaN that slips past "> 0").
// run.json's start-up record: phases in the order marked, a total that is their sum, and
// the first-step hook run once per arming.
TEST(Metrics, StartupPhasesAndTheFirstStepHook) {
  metrics::Startup& startup = metrics::Startup::process();
  if (portable::processStartSeconds(::getpid())) {  // Linux and macOS
    ASSERT_FALSE(startup.phases().empty());
    EXPECT_EQ(startup.phases().front().first, "load");  // not under mpirun: no "launch"
  }
  const std::size_t before = startup.phases().size();
  startup.mark("first");
  startup.mark("second");
  int calls = 0;
  startup.afterFirstStep([&] { ++calls; });
  startup.firstStepDone();
  startup.firstStepDone();
  EXPECT_EQ(calls, 1);
  const auto phases = startup.phases();
  ASSERT_EQ(phases.size(), before + 3);
  EXPECT_EQ(phases[before].first, "first");
  EXPECT_EQ(phases[before + 1].first, "second");
  EXPECT_EQ(phases[before + 2].first, "first_step");
  double sum = 0;
  for (const auto& [name, seconds] : phases) {
    EXPECT_GE(seconds, 0) << name;
    sum += seconds;
  }
  const std::string json = startup.json();
  EXPECT_NE(json.find("\"second\":"), std::string::npos) << json;
  const double total = std::stod(json.substr(json.find("\"total\":") + 8));
  EXPECT_NEAR(total, sum, 1e-9) << json;
  startup.afterFirstStep([&] { ++calls; });  // armed again: a new run
  startup.firstStepDone();
  EXPECT_EQ(calls, 2);
  startup.afterFirstStep(nullptr);
}

TEST(Cli, NumbersAreBoundedAndFinite) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--timeout", "inf"}, "--timeout"},          {{"--timeout", "1e300"}, "--timeout"},
      {{"--timeout", "nan"}, "--timeout"},          {{"--max-seconds", "nan"}, "--max-seconds"},
      {{"--epochs", "9000000000000000000"}, "--epochs"}, {{"--steps", "2000000000000"}, "--steps"},
      {{"--synthetic-size", "1000000000000"}, "--synthetic-size"}, {{"--bucket-kb", "9999999999"}, "--bucket-kb"},
      {{"--threads", "100000"}, "--threads"},       {{"--batch-size", "100000000"}, "--batch-size"},
      {{"--peer-timeout-ms", "nan"}, "--peer-timeout-ms"}, {{"--divergence-threshold", "inf"}, "--divergence-threshold"},
      {{"--checkpoint-every", "9000000000000000000"}, "--checkpoint-every"}, {{"--doorbell", "maybe"}, "--doorbell"},
      {{"--simulate-compute", "-1"}, "--simulate-compute"}, {{"--simulate-compute", "nan"}, "--simulate-compute"}};
  for (const auto& [args, flag] : bad) {
    const std::string error = parseError(args);
    EXPECT_NE(error.find(flag), std::string::npos) << args[0] << " " << args[1] << ": " << error;
  }
  config::TrainConfig cfg;
  cfg.epochs = std::int64_t(1) << 39;  // within the bound alone, too many steps with 4096 per epoch
  EXPECT_THROW(config::totalSteps(cfg, 4096), ConfigError);
  EXPECT_EQ(config::totalSteps(cfg, 1), std::int64_t(1) << 39);
}

TEST(Cli, PsevalNumbersAreBoundedAndFinite) {
  for (const std::vector<std::string>& args : {std::vector<std::string>{"--poll-seconds", "nan"},
                                               {"--idle-timeout", "inf"}, {"--poll-seconds", "-1"},
                                               {"--batch-size", "0"}, {"--threads", "-2"}}) {
    std::vector<std::string> argv = {"pseval", "--train-dir", "x"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> raw;
    for (auto& a : argv) raw.push_back(a.data());
    EXPECT_THROW(launcher::parseEvalCommand(static_cast<int>(raw.size()), raw.data()), ConfigError) << args[0];
  }
}

// Start-up errors of the ranks, said once each, naming the ranks unless all say it.
TEST(Cli, VerdictsNameTheRanksThatFailed) {
  EXPECT_EQ(launcher::describeVerdicts({"bad", "bad", "bad"}, "E: ", "."), "E: bad.");
  EXPECT_EQ(launcher::describeVerdicts({"", "no file", "no file"}, "E: ", "."), "E: ranks 1, 2: no file.");
  EXPECT_EQ(launcher::describeVerdicts({"x", "", "y"}, "", ""), "rank 0: x\nrank 2: y");
}

// Numbers in a trailer come from the network: only a whole step number becomes one.
TEST(Wire, TrailerNumbersAreCheckedBeforeUse) {
  EXPECT_EQ(protocol::trailerVersion(12.0f, 1), 12);
  for (float bad : {-1.0f, 0.5f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    1e30f}) {
    EXPECT_THROW(protocol::trailerVersion(bad, 1), CommError) << bad;
  }
  EXPECT_TRUE(protocol::sameCount(64.0f, 64.0));
  EXPECT_FALSE(protocol::sameCount(63.0f, 64.0));
  // Above 2^24 a float sum of counts is rounded: 2^24 + 1 samples arrive as 2^24.
  EXPECT_TRUE(protocol::sameCount(static_cast<float>((1 << 24) + 1), (1 << 24) + 1.0));
  EXPECT_FALSE(protocol::sameCount(std::numeric_limits<float>::quiet_NaN(), 1.0));
}

// pstrain-run's inputs: a discovery script's host:slots lines, an Open MPI hostfile.
TEST(Elastic, HostListsAndHostfilesParse) {
  auto hosts = launcher::parseHostList("# the Macs\nstudio:2\n\nmbp-1\nmbp-2:0\n  10.0.0.7:4  \n");
  ASSERT_EQ(hosts.size(), 3u);  // a host with 0 slots offers none
  EXPECT_EQ(launcher::describeHosts(hosts), "studio:2 mbp-1:1 10.0.0.7:4");
  EXPECT_THROW(launcher::parseHostList("studio:two\n"), ConfigError);
  EXPECT_THROW(launcher::parseHostList("a b:1\n"), ConfigError);
  auto file = launcher::parseHostfile("localhost slots=3\n# comment\nmbp-1.local slots = 2 max_slots=4\nbare\n");
  EXPECT_EQ(launcher::describeHosts(file), "localhost:3 mbp-1.local:2 bare:1");
}

TEST(Elastic, CommandsRunWithATimeout) {
  auto ok = launcher::runCommand({"sh", "-c", "echo hi; exit 3"}, std::chrono::seconds(10), true);
  EXPECT_EQ(ok.exitCode, 3);
  EXPECT_EQ(ok.output, "hi\n");
  EXPECT_FALSE(ok.timedOut);
  const auto start = std::chrono::steady_clock::now();
  auto slow = launcher::runCommand({"sh", "-c", "sleep 30"}, std::chrono::milliseconds(300), true);
  EXPECT_TRUE(slow.timedOut);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(launcher::runCommand({"/no/such/program"}, std::chrono::seconds(5), false).exitCode, 127);
}
