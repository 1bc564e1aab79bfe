// A model file's image (models/ModelFile.h): what is checked is byte for byte what is loaded.
// Crafted archives, laid out record by record (tests/common/ZipOf.h), as a user with a
// damaged file or an attacker with a crafted one would bring them.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/script.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <sstream>
#include <string>
#include <vector>

#include "models/ModelFile.h"
#include "models/ScriptModel.h"
#include "runtime/Errors.h"
#include "runtime/zip/ZipDirectory.h"
#include "tests/common/ScratchDir.h"
#include "tests/common/ZipOf.h"

using namespace pstrain;

namespace {

constexpr std::int64_t kLargeFloats = models::ModelFile::kLargeStorageBytes / 4;  // a large storage's floats

class ModelFile : public ::testing::Test {
 protected:
  // The records of `module` saved as torch.jit.save saves it, its code stored (not deflated):
  // plain text where a test moves it.
  static std::vector<testsupport::Member> recordsOf(const torch::jit::Module& module) {
    std::ostringstream out;
    module.save(out);
    auto members = testsupport::membersOf(out.str());
    for (auto& m : members) m.deflate = false;
    return members;
  }
  static std::size_t indexOf(const std::vector<testsupport::Member>& members, const std::string& suffix) {
    for (std::size_t i = 0; i < members.size(); ++i) {
      const std::string& n = members[i].name;
      if (n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) return i;
    }
    ADD_FAILURE() << "no record ends with " << suffix;
    return 0;
  }
  // Where the data of record `i` begin in zipAt(members, at).
  static std::uint64_t dataOf(const std::vector<testsupport::Member>& members, const std::vector<std::uint64_t>& at,
                              std::size_t i) {
    std::vector<std::uint64_t> data;
    testsupport::zipAt(members, at, &data);
    return data[i];
  }
  std::string write(const std::string& name, const std::string& bytes) {
    const std::string path = (scratch / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
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
  // A module with a large parameter `w` and a small one, `b`.
  static torch::jit::Module linear() {
    torch::jit::Module module("Linear");
    module.register_attribute("training", c10::BoolType::get(), true);
    torch::manual_seed(5);
    module.register_parameter("w", torch::randn({kLargeFloats}).requires_grad_(), false);
    module.register_parameter("b", torch::randn({4}).requires_grad_(), false);
    module.define("def forward(self, x):\n    return x * self.b + self.w[0:4]\n");
    return module;
  }
  testsupport::ScratchDir scratch{"model-file"};
};

}  // namespace

// Where a large storage's data lie, no other record's header or data may: the image leaves
// them out, so the checks would see zeros where the loader reads code or names. Three shapes,
// each refused before anything is read of it: a record's local header at the end of the
// storage's data (its own data after them), a code record inside them, and two large
// storages sharing bytes.
TEST_F(ModelFile, RecordsOverlappingALargeStorageAreRefused) {
  auto members = recordsOf(linear());
  const std::size_t w = indexOf(members, "/data/0");
  std::rotate(members.begin() + static_cast<std::ptrdiff_t>(w), members.begin() + w + 1, members.end());  // last
  const std::vector<std::uint64_t> apart(members.size(), testsupport::kAppend);
  EXPECT_TRUE(loadError(write("sound.pt", testsupport::zipAt(members, apart))).empty());
  const std::size_t storage = members.size() - 1;
  // `moved` (its local header) at `offset` from the start of the storage's data (or from its end).
  const auto moved = [&](std::size_t record, std::int64_t offset, bool fromEnd) {
    auto at = apart;
    at[record] = 0;
    const std::uint64_t data = dataOf(members, at, storage);
    at[record] = data + (fromEnd ? members[storage].data.size() : 0) + offset;
    return loadError(write("moved.pt", testsupport::zipAt(members, at)));
  };
  std::string error = moved(indexOf(members, "/version"), -10, true);  // a header: its data after the storage's
  EXPECT_NE(error.find("overlap"), std::string::npos) << error;
  error = moved(indexOf(members, "code/__torch__.py"), 4096, false);  // code inside the storage's data
  EXPECT_NE(error.find("overlap"), std::string::npos) << error;

  auto shared = members;  // a second large storage, its data on the first's last 1000 bytes
  shared.push_back({members[storage].name.substr(0, members[storage].name.size() - 1) + "1", members[storage].data});
  auto two = apart;
  two.push_back(dataOf(members, apart, storage) + 1000);
  error = loadError(write("shared.pt", testsupport::zipAt(shared, two)));
  EXPECT_NE(error.find("overlap"), std::string::npos) << error;
}

// The audit's file: the tail of the code (a __setstate__ that writes through /proc/self/fd/N,
// the descriptor the loader reads the file by) hidden in an unused stored record of 1 MiB,
// which the image left out, so that the checks compiled the class without it. Its local
// header comes first, the code's record inside its extra field, the code's tail in its
// data. Refused, and nothing written, whatever descriptor the code aims at; a large record
// that data.pkl does not name is refused even where it overlaps nothing.
TEST_F(ModelFile, CodeHiddenInAnUnusedLargeRecordNeverRuns) {
#if !defined(__linux__)
  GTEST_SKIP() << "the audit's code writes through Linux's /proc (RecordsOverlappingALargeStorageAreRefused: any system)";
#else
  const std::string victim = write("victim.bin", std::string(64, 'v'));
  for (int fd = 0; fd < 64; ++fd) {
    torch::jit::Module module("Hidden");
    module.register_attribute("training", c10::BoolType::get(), true);
    module.register_parameter("b", torch::ones({4}).requires_grad_(), false);
    module.define(fmt::format(R"(
      def __getstate__(self):
          return (self.b, self.training)
      def __setstate__(self, state: Tuple[Tensor, bool]):
          self.b = state[0]
          self.training = state[1]
          t = torch.from_file("/proc/self/fd/{}", True, 16)
          t.fill_(66.0)
      def forward(self, x):
          return x * self.b
    )", fd));
    auto members = recordsOf(module);
    const std::size_t code = indexOf(members, "code/__torch__.py");
    const std::string root = members[0].name.substr(0, members[0].name.find('/'));
    testsupport::Member unused{root + "/data/99", std::string(models::ModelFile::kLargeStorageBytes, 'x')};
    unused.extraBytes = 30 + members[code].name.size() + 40;  // the code's header and its first 40 bytes
    members.insert(members.begin() + static_cast<std::ptrdiff_t>(code), unused);
    std::vector<std::uint64_t> at(members.size(), testsupport::kAppend);
    at[code + 1] = 0;
    at[code + 1] = dataOf(members, at, code) - unused.extraBytes;
    const std::string bytes = testsupport::zipAt(members, at);
    const std::string path = write(fmt::format("hidden-{}.pt", fd), bytes);
    const int victimFd = ::open(victim.c_str(), O_RDWR | O_CLOEXEC);
    const std::string error = loadError(path);
    EXPECT_NE(error.find("overlap"), std::string::npos) << fd << ": " << error;
    ::close(victimFd);
    std::ifstream in(path, std::ios::binary);
    EXPECT_TRUE(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()) == bytes) << fd;
  }
  std::ifstream in(victim, std::ios::binary);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), std::string(64, 'v'));

  auto members = recordsOf(linear());
  const std::string root = members[0].name.substr(0, members[0].name.find('/'));
  members.push_back({root + "/data/99", std::string(models::ModelFile::kLargeStorageBytes, 'x')});
  const std::string error = loadError(write("unnamed.pt", testsupport::zipOf(members)));
  EXPECT_NE(error.find("data.pkl names no such storage"), std::string::npos) << error;
#endif
}

// A large storage's data are read from the file after the image, into their tensor: they
// must be what they were when the image was read, whatever the file's times say (rewritten
// in place, its modification time put back, within the same second).
TEST_F(ModelFile, AStorageRewrittenInPlaceIsRefusedWhateverItsTimes) {
  const std::string path = write("linear.pt", testsupport::zipOf(recordsOf(linear())));
  struct stat before {};
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  const models::ModelFile file(path);
  const std::string image(file.image());
  std::uint64_t at = 0;
  while (!file.isStorageData(at, models::ModelFile::kLargeStorageBytes)) ASSERT_LT(++at, image.size());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_EQ(::pwrite(fd, "changed!", 8, static_cast<off_t>(at + 100)), 8);
  // Whole seconds: the fields holding nanoseconds are named differently on macOS.
  const struct timespec times[2] = {{before.st_atime, 0}, {before.st_mtime, 0}};
  ASSERT_EQ(::futimens(fd, times), 0);
  ::close(fd);
  std::vector<char> into(models::ModelFile::kLargeStorageBytes);
  try {
    file.fill(at, into.data(), into.size());
    ADD_FAILURE() << "the rewritten storage was read";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("changed while it was being loaded"), std::string::npos) << e.what();
  }
}

// libtorch unpickles a code record's debug_pkl to format a TorchScript traceback (here: the
// start-up forward on an input of the wrong shape), and 1.13 crashes on some well-formed
// pickles there: the image hides those records from it, so a forward that fails throws.
TEST_F(ModelFile, DebugRecordsAreNeverUnpickled) {
  const std::vector<std::pair<std::string, std::string>> pickles = {
      {"an empty tuple", std::string("\x80\x02).", 4)},      // SIGSEGV in 1.13
      {"NONE, TUPLE2", std::string("\x80\x02N\x86.", 5)},    // free(): invalid size
      {"TUPLE1 on nothing", std::string("\x80\x02\x85.", 4)}};  // SIGSEGV in readInstruction
  for (const auto& [what, pickle] : pickles) {
    auto members = recordsOf(linear());
    for (auto& m : members) {
      if (m.name.size() > 10 && m.name.compare(m.name.size() - 10, 10, ".debug_pkl") == 0) m.data = pickle;
    }
    const std::string path = write("debug.pt", testsupport::zipOf(members));
    const models::ModelFile file(path);
    EXPECT_NE(std::string(file.image()).find(".py.debug_pk_"), std::string::npos);  // its name in the directory
    const auto net = models::loadScriptModel(path);
    EXPECT_THROW(net->forward(torch::zeros({3, 5})), std::exception) << what;
  }
}

// libtorch makes a tensor of whatever sizes, strides and offset a pickle says: a parameter of
// 10 x 784 over a storage of 16 floats (its record exactly 64 bytes) is refused before it is
// made, as a checkpoint's is.
TEST_F(ModelFile, ATensorReachingPastItsStorageIsRefused) {
  torch::jit::Module module("Small");
  module.register_attribute("training", c10::BoolType::get(), true);
  module.register_parameter("w", torch::ones({16}).requires_grad_(), false);
  module.define("def forward(self, x):\n    return x * self.w.sum()\n");
  auto members = recordsOf(module);
  std::string& pickle = members[indexOf(members, "/data.pkl")].data;
  const std::string view("(K\x10t(K\x01t", 8);  // sizes (16,), strides (1,)
  const std::size_t at = pickle.find(view);
  ASSERT_NE(at, std::string::npos);
  pickle.replace(at, view.size(), std::string("(K\nM\x10\x03t(M\x10\x03K\x01t", 14));  // (10, 784), (784, 1)
  const std::string error = loadError(write("past.pt", testsupport::zipOf(members)));
  EXPECT_NE(error.find("reaches past its storage of 16 elements"), std::string::npos) << error;
}

// Found by fuzz_image (tests/fuzz/corpus/image/directory-attribute.pt): a code record whose
// central directory entry has the DOS directory attribute. libtorch's miniz extracts nothing
// of a "directory" and reports success, so the loader would read the uninitialized memory
// libtorch allocated for it while the checks read the record's code. Refused, as a record
// that declares bytes it does not hold is.
TEST_F(ModelFile, RecordsThatLibtorchWouldNotExtractAreRefused) {
  const std::string marked = (std::filesystem::path(PSTRAIN_FUZZ_CORPUS) / "image" / "directory-attribute.pt").string();
  std::string error = loadError(marked);
  EXPECT_NE(error.find("is marked a directory"), std::string::npos) << error;
  // Found by fuzz_image too (nul-in-name.pt): libtorch looks records up by C string, so a
  // name with a NUL byte is another record's to it.
  error = loadError((std::filesystem::path(PSTRAIN_FUZZ_CORPUS) / "image" / "nul-in-name.pt").string());
  EXPECT_NE(error.find("has a NUL byte in its name"), std::string::npos) << error;
  auto members = recordsOf(linear());
  members[indexOf(members, "/version")].deflate = true;
  std::string bytes = testsupport::zipOf(members);
  // Its compressed size in its central directory entry (whose name is the last "/version") set to 0.
  const std::size_t entry = bytes.rfind(members[indexOf(members, "/version")].name) - 46;
  std::memset(&bytes[entry + 20], 0, 4);
  error = loadError(write("empty.pt", bytes));
  EXPECT_NE(error.find("declares 2 bytes but holds none"), std::string::npos) << error;
}
