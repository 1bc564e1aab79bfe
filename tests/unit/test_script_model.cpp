// A model of the user's (models/ScriptModel): TorchScript modules made here with libtorch's
// own compiler, loaded as pstrain loads --model FILE.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <torch/script.h>
#include <torch/torch.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "models/Registry.h"
#include "models/ScriptModel.h"
#include "runtime/Errors.h"
#include "runtime/Portable.h"
#include "runtime/Process.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "tests/common/ScratchDir.h"

using namespace pstrain;

namespace {

class ScriptModel : public ::testing::Test {
 protected:
  // A linear layer with dropout, as torch.jit.script(...).save(path) would leave it.
  std::string linearWithDropout(const std::string& name) {
    torch::jit::Module module("Linear");
    module.register_attribute("training", c10::BoolType::get(), true);  // what nn.Module has
    torch::manual_seed(1);
    module.register_parameter("weight", torch::randn({3, 4}), false);
    module.register_parameter("bias", torch::zeros({3}), false);
    module.define(R"(
      def forward(self, x):
          y = torch.matmul(x, self.weight.t()) + self.bias
          return torch.dropout(y, 0.5, self.training)
    )");
    const std::string path = (scratch.path() / name).string();
    module.save(path);
    return path;
  }
  std::string loadError(const std::string& path) {
    try {
      models::loadScriptModel(path);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  }
  testsupport::ScratchDir scratch{"script"};
};

}  // namespace

TEST_F(ScriptModel, ParametersAreTheModulesAndTrainEvalSwitchDropout) {
  const std::string path = linearWithDropout("linear.pt");
  auto net = models::loadScriptModel(path);
  EXPECT_EQ(models::parameterCount(*net), 3 * 4 + 3);
  const auto state = models::stateDict(*net);
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[0].first, "weight");
  EXPECT_EQ(state[1].first, "bias");
  // The TorchScript code reads the very tensors pstrain binds to its flat buffers.
  { torch::NoGradGuard noGrad; state[1].second.fill_(1); }
  net->eval();
  const at::Tensor x = torch::zeros({2, 4});
  EXPECT_TRUE(torch::equal(net->forward(x), torch::ones({2, 3})));  // eval: no dropout
  net->train();
  const at::Tensor y = net->forward(torch::ones({64, 4}));
  EXPECT_GT((y == 0).sum().item<int>(), 0);  // train: dropout zeroes some
  EXPECT_NE(net->fileIdentity().find("crc32 "), std::string::npos);
  std::ostringstream script;
  EXPECT_TRUE(net->saveTorchScript(script));
  EXPECT_FALSE(script.str().empty());
}

TEST_F(ScriptModel, FilesThatAreNotTorchScriptAreClearErrors) {
  EXPECT_NE(loadError((scratch.path() / "missing.pt").string()).find("no such file"), std::string::npos);
  const std::string text = (scratch.path() / "text.pt").string();
  std::ofstream(text) << "not a model\n";
  EXPECT_NE(loadError(text).find("not a TorchScript file"), std::string::npos) << loadError(text);
  const std::string stateDict = (scratch.path() / "state.pt").string();
  checkpoint::writeStateDict(stateDict, {{"w", torch::ones({2})}});
  EXPECT_NE(loadError(stateDict).find("not a TorchScript module but a file of torch.save"), std::string::npos)
      << loadError(stateDict);
}

TEST_F(ScriptModel, TiedWeightsAreRefused) {
  torch::jit::Module module("Tied");
  const at::Tensor shared = torch::ones({2, 2});
  module.register_parameter("a", shared, false);
  module.register_parameter("b", shared, false);
  module.define("def forward(self, x):\n    return x.mm(self.a).mm(self.b)\n");
  const std::string path = (scratch.path() / "tied.pt").string();
  module.save(path);
  EXPECT_NE(loadError(path).find("tied weights"), std::string::npos) << loadError(path);
}

// The fuzz tier's seeds for the model loader (tests/fuzz/corpus/model): the 15 hostile files
// of tests/e2e/untrusted_models.py, whose code writes NAME-wrote.bin where it runs (in
// forward, __setstate__, a forked body or a helper; the call spelled to escape a text scan).
// Each is refused naming --trust-model, and nothing of theirs ran while it was looked at.
// And parser-segv.pt, a mutation of one the fuzzer found, on which libtorch 1.13's TorchScript
// parser dies of SIGSEGV: refused, as pstrain and pseval load models, by the death of the
// check process (pseval --check-model), and this process lives on.
TEST_F(ScriptModel, TheUntrustedCorpusIsRefusedBeforeAnyOfItsCodeRuns) {
  namespace fs = std::filesystem;
  const fs::path corpus = fs::path(PSTRAIN_FUZZ_CORPUS) / "model";
  const fs::path before = fs::current_path();
  fs::current_path(scratch.path());
  models::modelCheckCommand() = {PSTRAIN_PSEVAL, "--check-model"};
  int files = 0;
  for (const auto& entry : fs::directory_iterator(corpus)) {
    ++files;
    const std::string error = loadError(entry.path().string());
    const bool crashes = entry.path().filename() == "parser-segv.pt";
    EXPECT_NE(error.find(crashes ? "TorchScript compiler died of signal" : "--trust-model"), std::string::npos)
        << entry.path() << ": " << error;
  }
  models::modelCheckCommand().clear();
  std::vector<std::string> wrote;
  for (const auto& entry : fs::directory_iterator(scratch.path())) wrote.push_back(entry.path().filename().string());
  fs::current_path(before);
  EXPECT_EQ(files, 16);
  EXPECT_TRUE(wrote.empty()) << wrote.front();
}

// The check process takes exactly the byte count it is told (read into one string of that
// size): a file one byte longer or shorter than said is refused, the right count passes.
TEST_F(ScriptModel, TheCheckProcessTakesExactlyTheBytesItIsTold) {
  const std::string path = linearWithDropout("good.pt");
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto check = [&](std::size_t told) {
    return process::runCommand({PSTRAIN_PSEVAL, "--check-model", path, "--stdin", std::to_string(told)},
                               std::chrono::seconds(60), /*captureOutput=*/true, {}, bytes);
  };
  EXPECT_EQ(check(bytes.size()).exitCode, 0);
  const auto longer = check(bytes.size() - 1), shorter = check(bytes.size() + 1);
  EXPECT_EQ(longer.exitCode, 2);
  EXPECT_NE(longer.output.find("more than the"), std::string::npos) << longer.output;
  EXPECT_EQ(shorter.exitCode, 2);
  EXPECT_NE(shorter.output.find("of the"), std::string::npos) << shorter.output;
}

// A model file swapped for a hostile one while it is being loaded (renamed in, again and
// again, by another thread): the loader reads the file once, then checks and loads those
// bytes, so each load either loads the good model or refuses the hostile one, and the
// hostile file's __setstate__ never runs. (Opened by path for the check, the load and the
// checksum, 3 of 3 tries once ran it.)
TEST_F(ScriptModel, AFileSwappedWhileItLoadsNeverRunsTheSwappedInCode) {
  namespace fs = std::filesystem;
  const fs::path before = fs::current_path();
  fs::current_path(scratch.path());
  const std::string good = linearWithDropout("good.pt");
  const std::string hostile = (scratch.path() / "hostile.pt").string();
  fs::copy_file(fs::path(PSTRAIN_FUZZ_CORPUS) / "model" / "setstate.pt", hostile);
  const std::string target = (scratch.path() / "model.pt").string();
  fs::copy_file(good, target);
  std::atomic<bool> stop{false};
  std::thread swapper([&] {
    const std::string next = (scratch.path() / "next.pt").string();
    for (int i = 0; !stop; ++i) {
      fs::copy_file(i % 2 ? good : hostile, next, fs::copy_options::overwrite_existing);
      fs::rename(next, target);
    }
  });
  int loaded = 0, refused = 0;
  for (int i = 0; i < 40; ++i) {
    try {
      models::loadScriptModel(target);
      ++loaded;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--trust-model"), std::string::npos) << e.what();
      ++refused;
    }
  }
  stop = true;
  swapper.join();
  std::vector<std::string> wrote;
  for (const auto& entry : fs::directory_iterator(scratch.path())) {
    const std::string name = entry.path().filename().string();
    if (name.find("wrote") != std::string::npos) wrote.push_back(name);
  }
  fs::current_path(before);
  EXPECT_EQ(loaded + refused, 40);
  EXPECT_TRUE(wrote.empty()) << wrote.front();
}

// The check process's sandbox (defence in depth: the trial load of a model file that passed
// the checks): reading stays allowed; writing a file, opening a socket or running a program
// kills the process with SIGSYS. Each in a child process of its own. Skipped where the
// system has none (macOS).
TEST(Sandbox, ForbidsWritingSocketsAndProgramsButNotReading) {
  testsupport::ScratchDir scratch("sandbox");
  const std::string written = (scratch.path() / "written").string();
  const std::string existing = (scratch.path() / "existing").string();
  std::ofstream(existing) << "read me";
  auto inSandbox = [&](const std::function<void()>& attempt) {
    const pid_t child = ::fork();
    if (child == 0) {
      if (!portable::forbidWritesSocketsAndPrograms()) ::_exit(77);
      attempt();
      ::_exit(0);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    return status;
  };
  const int reading = inSandbox([&] {
    const int fd = ::open(existing.c_str(), O_RDONLY);
    char buffer[16];
    if (fd < 0 || ::read(fd, buffer, sizeof buffer) <= 0) ::_exit(1);
  });
  if (WIFEXITED(reading) && WEXITSTATUS(reading) == 77) GTEST_SKIP() << "no sandbox on this system";
  EXPECT_TRUE(WIFEXITED(reading) && WEXITSTATUS(reading) == 0) << "reading a file was refused: " << reading;
  const std::vector<std::pair<const char*, std::function<void()>>> forbidden = {
      {"open for writing", [&] { ::open(written.c_str(), O_WRONLY | O_CREAT, 0600); }},
      {"a socket", [] { ::socket(AF_INET, SOCK_STREAM, 0); }},
      {"running a program", [] {
         char* const argv[] = {const_cast<char*>("/bin/true"), nullptr};
         ::execv("/bin/true", argv);
       }},
      {"renaming", [&] { ::rename(existing.c_str(), written.c_str()); }},
  };
  for (const auto& [what, attempt] : forbidden) {
    const int status = inSandbox(attempt);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS) << what << ": " << status;
  }
  EXPECT_FALSE(std::filesystem::exists(written));
}
