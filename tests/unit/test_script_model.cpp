// A model of the user's (models/ScriptModel): TorchScript modules made here with libtorch's
// own compiler, loaded as pstrain loads --model FILE.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <torch/script.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "models/ModelFile.h"
#include "models/Registry.h"
#include "models/StateDict.h"
#include "models/ScriptModel.h"
#include "runtime/Errors.h"
#include "runtime/Portable.h"
#include "runtime/Process.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/zip/ZipDirectory.h"
#include "tests/common/ScratchDir.h"
#include "tests/common/ZipOf.h"

using namespace pstrain;

namespace {

class ScriptModel : public ::testing::Test {
 protected:
  // A linear layer with dropout, as torch.jit.script(...).save(path) would leave it.
  std::string linearWithDropout(const std::string& name) {
    torch::jit::Module module("Linear");
    module.register_attribute("training", c10::BoolType::get(), true);  // what nn.Module has
    torch::manual_seed(1);
    module.register_parameter("weight", torch::randn({3, 4}).requires_grad_(), false);
    module.register_parameter("bias", torch::zeros({3}).requires_grad_(), false);
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

// A model file's large storages (1 MiB or more) are read into their tensors only: a rank
// that needs part of the weights (a server of K > 1) never reads or holds the parameters
// wholly outside it, whose memory is never written; small parameters, buffers and
// the parameters it needs are the file's. The image it checks leaves that data out, and the
// file's identity is still the whole file's CRC.
TEST_F(ScriptModel, OnlyTheWeightsNeededAreReadFromTheFile) {
  torch::jit::Module module("Parts");
  torch::manual_seed(3);
  // `a` of more than malloc's largest mmap threshold (32 MiB): fresh pages whatever the heap
  const std::int64_t big = 9 * 1024 * 1024;
  const at::Tensor a = torch::randn({9 * 1024, 1024}), b = torch::randn({512, 1024}), c = torch::randn({10});
  const at::Tensor m = torch::randn({512, 1024});
  module.register_parameter("a", a.requires_grad_(), false);
  module.register_parameter("b", b.requires_grad_(), false);
  module.register_parameter("c", c.requires_grad_(), false);
  module.register_buffer("m", m);
  module.define("def forward(self, x):\n    return x\n");
  const std::string path = (scratch.path() / "parts.pt").string();
  module.save(path);
  // Earlier tests' freed memory (the zoo's models) may lie in the heap as a free chunk big
  // enough for `a`, its pages resident: given back, a reuse of them is fresh pages too.
  portable::giveBackFreedMemory();

  const auto net = models::loadScriptModel(path, [&](const models::Net& n) {
    EXPECT_EQ(models::parameterCount(n), big + 512 * 1024 + 10);
    return models::FlatSpan{big, big + 1};  // b only
  });
  const auto state = models::stateDict(*net);
  ASSERT_EQ(state.size(), 4u);
  const at::Tensor& gotA = state[0].second;
  std::vector<unsigned char> resident((gotA.nbytes() + 4095) / 4096);
  const auto page = reinterpret_cast<std::uintptr_t>(gotA.data_ptr()) & ~std::uintptr_t(4095);
  ASSERT_EQ(::mincore(reinterpret_cast<void*>(page), gotA.nbytes() - 4096, resident.data()), 0);
  std::size_t touched = 0;
  for (std::size_t i = 1; i + 1 < resident.size(); ++i) touched += resident[i] & 1;  // not the ends
  EXPECT_EQ(touched, 0u) << "pages of a parameter never read";
  EXPECT_TRUE(torch::equal(state[1].second, b));
  EXPECT_TRUE(torch::equal(state[2].second, c));
  EXPECT_TRUE(torch::equal(state[3].second, m));
  EXPECT_EQ(net->heldWeights().begin, big);
  EXPECT_EQ(net->heldWeights().end, big + 1);

  const auto whole = models::loadScriptModel(path);
  const auto all = models::stateDict(*whole);
  EXPECT_TRUE(torch::equal(all[0].second, a));
  EXPECT_TRUE(torch::equal(all[1].second, b));
  EXPECT_EQ(whole->heldWeights().begin, 0);
  EXPECT_EQ(whole->heldWeights().end, std::numeric_limits<std::int64_t>::max());

  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const models::ModelFile file(path);
  ASSERT_EQ(file.image().size(), bytes.size());
  const std::size_t at = bytes.find(std::string(reinterpret_cast<const char*>(b.data_ptr()), 64));
  ASSERT_NE(at, std::string::npos);
  EXPECT_TRUE(file.isStorageData(at, b.nbytes()));
  EXPECT_FALSE(file.isStorageData(at, b.nbytes() - 1));
  EXPECT_TRUE(file.image().substr(at, b.nbytes()) == std::string(b.nbytes(), '\0'));
  const std::size_t end = at + b.nbytes();  // its data descriptor, the next record's header; the directory
  EXPECT_TRUE(file.image().substr(end, 64) == std::string_view(bytes).substr(end, 64));
  int hidden = 0;  // the directory, but the debug records' names (ModelFile.h): ".debug_pk_"
  for (std::size_t i = bytes.size() - 1024; i < bytes.size(); ++i) {
    if (file.image()[i] == bytes[i]) continue;
    EXPECT_EQ(bytes.substr(i - 9, 10), ".debug_pkl");
    EXPECT_EQ(file.image()[i], '_');
    ++hidden;
  }
  EXPECT_GT(hidden, 0);
  std::string copied(20, 'x');
  file.copyImage(at - 20, copied.data(), copied.size());  // its local header, up to its data: the file's
  EXPECT_TRUE(copied == bytes.substr(at - 20, 20));
  EXPECT_THROW(file.copyImage(at - 10, copied.data(), copied.size()), ConfigError);  // part of its data: refused
  EXPECT_EQ(file.identity(), fmt::format("crc32 {:08x}, {} bytes", zip::crc32Of(0, bytes.data(), bytes.size()),
                                         bytes.size()));
  EXPECT_EQ(whole->fileIdentity(), file.identity());
  std::string filled(b.nbytes(), '\0');
  file.fill(at, filled.data(), filled.size());
  EXPECT_TRUE(filled == bytes.substr(at, b.nbytes()));
}

// Loading runs a module's __setstate__ on what was read: a file whose code has one is loaded
// with every storage read first, so that what it derives from its weights is the weights'.
TEST_F(ScriptModel, ASetStateSeesTheWeightsEvenWhereTheyAreNotNeeded) {
  torch::jit::Module module("Derived");
  torch::manual_seed(4);
  const at::Tensor w = torch::randn({512, 1024});  // 2 MiB: a large storage
  module.register_parameter("w", w.requires_grad_(), false);
  module.register_attribute("doubled", c10::TensorType::get(), torch::zeros({1}));
  module.register_attribute("training", c10::BoolType::get(), true);
  module.define(R"(
    def __getstate__(self):
        return (self.w, self.training)
    def __setstate__(self, state: Tuple[Tensor, bool]):
        self.w = state[0]
        self.doubled = state[0] * 2
        self.training = state[1]
    def forward(self, x):
        return x + self.doubled.sum()
  )");
  const std::string path = (scratch.path() / "derived.pt").string();
  module.save(path);
  models::modelFilePolicy().trusted = true;  // __setstate__ is code the check would weigh: not what this test is about
  const auto net = models::loadScriptModel(path, [](const models::Net&) { return models::FlatSpan{0, 0}; });
  models::modelFilePolicy().trusted = false;
  const at::Tensor out = net->forward(torch::zeros({1}));
  EXPECT_NEAR(out.item<float>(), (w * 2).sum().item<float>(), 1e-2);
  EXPECT_TRUE(torch::equal(models::stateDict(*net)[0].second, w));
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

// A tensor under two names (GPT-2's tie) is one trained parameter, whose gradient autograd
// sums over its uses; a parameter that does not require grad is a frozen weight, in no
// flat buffer; stateDict() has every name.
TEST_F(ScriptModel, ATieIsOneTrainedTensorAndAFrozenOneIsAWeight) {
  torch::jit::Module module("Tied");
  torch::manual_seed(5);
  const at::Tensor shared = torch::randn({2, 2}).requires_grad_(), frozen = torch::randn({2});
  module.register_parameter("a", shared, false);
  module.register_parameter("f", frozen, false);
  module.register_parameter("b", shared, false);
  module.define("def forward(self, x):\n    return x.mm(self.a).mm(self.b) + self.f\n");
  const std::string path = (scratch.path() / "tied.pt").string();
  module.save(path);
  auto net = models::loadScriptModel(path);
  EXPECT_EQ(models::parameterCount(*net), 4);
  EXPECT_EQ(models::frozenCount(*net), 2);
  ASSERT_EQ(net->frozen().size(), 1u);
  EXPECT_EQ(net->frozen()[0].first, "f");
  ASSERT_EQ(net->ties().size(), 1u);
  EXPECT_EQ(net->ties()[0], std::make_pair(std::string("b"), std::string("a")));
  const auto state = models::stateDict(*net);
  ASSERT_EQ(state.size(), 3u);
  EXPECT_EQ(state[0].first, "a");
  EXPECT_EQ(state[1].first, "f");
  EXPECT_EQ(state[2].first, "b");
  EXPECT_TRUE(state[2].second.is_same(state[0].second));
  EXPECT_FALSE(state[1].second.requires_grad());

  // Bound to flat buffers as a worker binds them: one slot, the gradient of both uses.
  const at::Tensor weights = torch::zeros({4}), grad = torch::zeros({4});
  protocol::bindParameters(*net, weights);
  protocol::bindGradients(*net, grad);
  const at::Tensor x = torch::randn({3, 2});
  net->forward(x).sum().backward();
  protocol::collectGradients(*net, grad);
  const at::Tensor leaf = shared.detach().clone().requires_grad_();
  (x.mm(leaf).mm(leaf) + frozen).sum().backward();
  EXPECT_TRUE(torch::allclose(grad.view({2, 2}), leaf.grad(), 1e-6, 1e-6));
  EXPECT_TRUE(torch::equal(weights.view({2, 2}), shared.detach()));
  EXPECT_TRUE(torch::equal(net->frozen()[0].second, frozen));  // untouched, as loaded
}

// Two tensors that view one storage otherwise (other offsets or shapes) would be untied by
// their binding to the flat buffer: refused, naming both.
TEST_F(ScriptModel, ViewsOfOneStorageAreRefused) {
  torch::jit::Module module("Views");
  const at::Tensor base = torch::randn({4, 2});
  module.register_parameter("top", base.narrow(0, 0, 2).requires_grad_(), false);
  module.register_parameter("bottom", base.narrow(0, 2, 2), false);
  module.define("def forward(self, x):\n    return x.mm(self.top) + x.mm(self.bottom)\n");
  const std::string path = (scratch.path() / "views.pt").string();
  module.save(path);
  const std::string error = loadError(path);
  EXPECT_NE(error.find("'top' and 'bottom' are views of one storage"), std::string::npos) << error;
}

// A forward of the inputs and the targets computes its own loss: found as the one scalar of
// what it returns (a tuple's, a list's, a dict's "loss"), with the logits shaped as the
// targets plus one dimension beside it; two scalars are refused, naming what forward declares.
TEST_F(ScriptModel, AModelsOwnLossIsTheOneScalarItsForwardReturns) {
  const auto modelReturning = [&](const std::string& name, const std::string& body) {
    torch::jit::Module module(name);
    module.register_parameter("w", torch::ones({3, 5}).requires_grad_(), false);
    module.define(body);
    const std::string path = (scratch.path() / (name + ".pt")).string();
    module.save(path);
    return models::loadScriptModel(path);
  };
  const at::Tensor x = torch::randn({2, 4, 3}), y = torch::randint(5, {2, 4});
  const std::string logits = "        logits = x.matmul(self.w)\n";
  auto tuple = modelReturning("Tuple", "def forward(self, x, targets):\n" + logits +
      "        return logits, torch.cross_entropy_loss(logits.flatten(0, 1), targets.flatten())\n");
  EXPECT_TRUE(tuple->computesOwnLoss());
  EXPECT_NE(tuple->forwardSignature().find("forward(Tensor x, Tensor targets) -> Tuple[Tensor, Tensor]"),
            std::string::npos) << tuple->forwardSignature();
  const models::OwnLoss own = tuple->forwardWithTargets(x, y);
  const at::Tensor expected = torch::nn::functional::cross_entropy(x.matmul(torch::ones({3, 5})).flatten(0, 1), y.flatten());
  EXPECT_TRUE(torch::allclose(own.loss, expected));
  EXPECT_EQ(own.logits.sizes(), at::IntArrayRef({2, 4, 5}));
  auto dict = modelReturning("Dict", "def forward(self, x, y):\n" + logits +
      "        return {'logits': logits, 'loss': logits.mean()}\n");
  EXPECT_TRUE(torch::allclose(dict->forwardWithTargets(x, y).loss, x.matmul(torch::ones({3, 5})).mean()));
  EXPECT_TRUE(dict->forwardWithTargets(x, y).logits.defined());
  auto scalar = modelReturning("Scalar", "def forward(self, x, y):\n" + logits + "        return logits.sum()\n");
  EXPECT_FALSE(scalar->forwardWithTargets(x, y).logits.defined());
  auto two = modelReturning("Two", "def forward(self, x, y):\n" + logits +
      "        return logits.sum(), logits.mean()\n");
  try {
    two->forwardWithTargets(x, y);
    ADD_FAILURE() << "two scalars accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holding 2 scalars"), std::string::npos) << e.what();
  }
  auto plain = modelReturning("Plain", "def forward(self, x):\n" + logits + "        return logits\n");
  EXPECT_FALSE(plain->computesOwnLoss());
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

// The check process checks the file it is given as its standard input (the descriptor the
// loader opened), whatever is at the path by then: a good file passes, a hostile one at the
// same path is refused, and anything but a regular file in its place (here /dev/null) too.
TEST_F(ScriptModel, TheCheckProcessChecksTheFileItIsGiven) {
  namespace fs = std::filesystem;
  const std::string good = linearWithDropout("good.pt");
  const std::string hostile = (fs::path(PSTRAIN_FUZZ_CORPUS) / "model" / "setstate.pt").string();
  auto check = [&](const std::string& opened, const std::string& named) {
    const int fd = opened.empty() ? -1 : ::open(opened.c_str(), O_RDONLY | O_CLOEXEC);
    auto result = process::runCommand({PSTRAIN_PSEVAL, "--check-model", named, "--stdin", "--parent",
                                       std::to_string(::getpid())},
                                      std::chrono::seconds(60), /*captureOutput=*/true, {}, fd);
    if (fd >= 0) ::close(fd);
    return result;
  };
  EXPECT_EQ(check(good, hostile).exitCode, 0);
  const auto refused = check(hostile, good);
  EXPECT_EQ(refused.exitCode, 2);
  EXPECT_NE(refused.output.find("--trust-model"), std::string::npos) << refused.output;
  const auto none = check("", good);
  EXPECT_EQ(none.exitCode, 2);
  EXPECT_NE(none.output.find("not the regular file"), std::string::npos) << none.output;
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

// A module whose __setstate__ (which loading runs) does `body` after restoring its state.
std::string moduleWithSetState(const std::filesystem::path& dir, const std::string& name, const std::string& body) {
  torch::jit::Module module("Restored");
  module.register_attribute("training", c10::BoolType::get(), true);
  module.register_parameter("w", torch::ones({3}).requires_grad_(), false);
  module.define(R"(
    def __getstate__(self):
        return (self.w, self.training)
    def __setstate__(self, state: Tuple[Tensor, bool]):
        self.w = state[0]
        self.training = state[1]
)" + body + R"(
    def forward(self, x):
        return x * self.w
  )");
  const std::string path = (dir / name).string();
  module.save(path);
  return path;
}

// A __setstate__ that raises is the file's own failure, said as it is: by the check process's
// trial load (which refuses on any failure), naming the function and what it raised.
TEST_F(ScriptModel, ASetStateThatFailsIsSaidAsItIs) {
  const std::string path = moduleWithSetState(scratch.path(), "raises.pt",
                                              "        assert 1 == 2, \"the model's own complaint\"\n");
  for (const bool apart : {true, false}) {
    if (apart) models::modelCheckCommand() = {PSTRAIN_PSEVAL, "--check-model"};
    const std::string error = loadError(path);
    models::modelCheckCommand().clear();
    EXPECT_NE(error.find("loading it ran its code, which failed, in __setstate__"), std::string::npos) << error;
    EXPECT_NE(error.find("the model's own complaint"), std::string::npos) << error;
    EXPECT_EQ(error.find("newer PyTorch"), std::string::npos) << error;
  }
}

// Code that never ends: the check process is stopped at the limit (--timeout), and a load in
// this process (--trust-model: no check process) ends the process, naming the file. Each
// within a few seconds of the limit.
TEST_F(ScriptModel, ALoadThatNeverEndsIsStopped) {
  const std::string path = moduleWithSetState(scratch.path(), "loops.pt",
                                              "        while True:\n            self.training = state[1]\n");
  models::modelFilePolicy().seconds = 2;
  models::modelCheckCommand() = {PSTRAIN_PSEVAL, "--check-model"};
  const auto start = std::chrono::steady_clock::now();
  const std::string error = loadError(path);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  models::modelCheckCommand().clear();
  EXPECT_NE(error.find(path + ": checking and loading it in the process that checks model files took more than 2 s"),
            std::string::npos) << error;
  EXPECT_LT(took, 10);
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(
      {
        models::modelFilePolicy().trusted = true;
        models::loadScriptModel(path);
      },
      ::testing::ExitedWithCode(2), "loops.pt: loading it \\(running its code: a __setstate__\\) took more than 2 s");
  models::modelFilePolicy().seconds = 300;
}

// The pids of the processes whose command line holds `text` (ps: Linux and macOS).
std::vector<pid_t> processesWith(const std::string& text) {
  std::vector<pid_t> pids;
  std::FILE* ps = ::popen("ps -A -ww -o pid= -o args=", "r");
  char line[4096];
  while (ps && std::fgets(line, sizeof line, ps)) {
    if (std::string(line).find(text) != std::string::npos) pids.push_back(static_cast<pid_t>(std::atol(line)));
  }
  if (ps) ::pclose(ps);
  return pids;
}

// A check process ends with the process that started it, however that one ended (SIGKILL
// here): no check outlives its rank, spinning on a file's endless code.
TEST_F(ScriptModel, TheCheckProcessEndsWithItsParent) {
  const std::string path = moduleWithSetState(scratch.path(), "spins.pt",
                                              "        while True:\n            self.training = state[1]\n");
  const pid_t loader = ::fork();
  if (loader == 0) {
    models::modelCheckCommand() = {PSTRAIN_PSEVAL, "--check-model"};
    try {
      models::loadScriptModel(path);
    } catch (...) {
    }
    ::_exit(0);
  }
  const std::string mark = "--parent " + std::to_string(loader);
  for (int i = 0; i < 300 && processesWith(mark).empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_FALSE(processesWith(mark).empty()) << "no check process started";
  ::kill(loader, SIGKILL);
  ::waitpid(loader, nullptr, 0);
  for (int i = 0; i < 60 && !processesWith(mark).empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto left = processesWith(mark);
  for (const pid_t pid : left) ::kill(pid, SIGKILL);
  EXPECT_TRUE(left.empty()) << "the check process outlived its parent by 3 s";
}

// Names from a file reach the terminal only as printable text: a class name holding a
// terminal's escape sequences, a window title and a carriage return.
TEST_F(ScriptModel, NamesFromTheFileArePrintedAsText) {
  const std::string path = linearWithDropout("named.pt");
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto members = testsupport::membersOf(bytes);
  for (auto& m : members) {
    if (m.name.size() > 9 && m.name.compare(m.name.size() - 9, 9, "/data.pkl") == 0) {
      const std::size_t global = m.data.find("c__torch__\n");
      ASSERT_NE(global, std::string::npos);
      m.data.replace(global, 11, "c__torch__\x1b[2J\x1b]0;owned\x07\r\n");
    }
  }
  const std::string crafted = (scratch.path() / "escapes.pt").string();
  std::ofstream(crafted, std::ios::binary) << testsupport::zipOf(members);
  const std::string error = loadError(crafted);
  EXPECT_NE(error.find("\\x1b[2J"), std::string::npos) << error;
  EXPECT_TRUE(std::none_of(error.begin(), error.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; }))
      << error;
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
