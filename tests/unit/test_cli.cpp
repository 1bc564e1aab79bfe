// pstrain's and pseval's command lines (launcher/Cli, over the flag table of
// runtime/config/Flags): every flag read, nonsense refused naming the flag, numbers bounded.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "launcher/Cli.h"
#include "runtime/Errors.h"
#include "runtime/config/TrainConfig.h"

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

TEST(Cli, NumbersAreBoundedAndFinite) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--timeout", "inf"}, "--timeout"},          {{"--timeout", "1e300"}, "--timeout"},
      {{"--timeout", "nan"}, "--timeout"},          {{"--max-seconds", "nan"}, "--max-seconds"},
      {{"--epochs", "9000000000000000000"}, "--epochs"}, {{"--steps", "2000000000000"}, "--steps"},
      {{"--synthetic-size", "1000000000000"}, "--synthetic-size"}, {{"--bucket-kb", "9999999999"}, "--bucket-kb"},
      {{"--threads", "100000"}, "--threads"},       {{"--batch-size", "100000000"}, "--batch-size"},
      {{"--peer-timeout-ms", "nan"}, "--peer-timeout-ms"}, {{"--divergence-threshold", "inf"}, "--divergence-threshold"},
      {{"--checkpoint-every", "9000000000000000000"}, "--checkpoint-every"}, {{"--doorbell", "maybe"}, "--doorbell"},
      {{"--simulate-compute", "-1"}, "--simulate-compute"}, {{"--simulate-compute", "nan"}, "--simulate-compute"},
      {{"--loss-scale", "static"}, "--loss-scale"},  {{"--loss-scale-window", "0"}, "--loss-scale-window"},
      {{"--inject-overflow", "1"}, "--inject-overflow"}, {{"--inject-overflow", "1:2.5"}, "--inject-overflow"}};
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
                                               {"--batch-size", "0"}, {"--threads", "-2"},
                                               {"--device", "tpu"}}) {  // a device without a row: never auto
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
