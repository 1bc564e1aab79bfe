// Weights from elsewhere and for elsewhere (checkpoint/WeightsFile, Safetensors, zip/Pickle,
// zip/Json, models::loadPretrained): the formats by their specs, every malformed or hostile
// file a ConfigError naming it (deep, huge or overflowing ones among them), a pretrained
// state dict's names and shapes held strictly.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "models/Registry.h"
#include "models/StateDict.h"
#include "runtime/Errors.h"
#include "runtime/checkpoint/Safetensors.h"
#include "runtime/checkpoint/WeightsFile.h"
#include "runtime/optim/MatrixSpans.h"
#include "models/StateDict.h"
#include "runtime/FileLimits.h"
#include "runtime/zip/ArchiveCheck.h"
#include "runtime/zip/Json.h"
#include "runtime/zip/Pickle.h"
#include "tests/common/ZipOf.h"
#include "tests/common/ScratchDir.h"

using namespace pstrain;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// What reading `bytes` as weights says ("" when it reads them).
std::string refusal(const std::string& bytes) {
  try {
    checkpoint::readWeights(bytes, "w");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// A safetensors file of one header and `data` bytes.
std::string safetensors(const std::string& header, std::size_t data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>(header.size() >> (8 * i) & 0xFF);
  return out + header + std::string(data, '\0');
}

class WeightsFile : public ::testing::Test {
 protected:
  testsupport::ScratchDir scratch{"weights"};
};

}  // namespace

// Written and read back: every dtype pstrain reads, a tie once with its name in
// __metadata__, the data aligned at 8 bytes; as a state dict too.
TEST_F(WeightsFile, SafetensorsAndStateDictsRoundTrip) {
  const at::Tensor w = torch::randn({3, 5}), b = torch::randn({5}).to(torch::kBFloat16);
  const checkpoint::TensorList tensors = {{"w", w},
                                          {"b", b},
                                          {"h", torch::randn({2}).to(torch::kHalf)},
                                          {"n", torch::tensor({7}, torch::kLong)},
                                          {"tied", w}};
  const std::string path = (scratch.path() / "x.safetensors").string();
  checkpoint::writeWeightsFile(path, tensors);
  const std::string bytes = slurp(path);
  const auto fail = [](const std::string& what) { throw ConfigError(what); };
  const std::uint64_t n = checkpoint::safetensorsHeaderLength(bytes, bytes.size(), fail);
  const checkpoint::SafetensorsHeader header = checkpoint::readSafetensorsHeader(bytes.substr(8, n), bytes.size(), fail);
  EXPECT_EQ(header.dataStart % 8, 0u);
  ASSERT_EQ(header.tensors.size(), 4u);
  EXPECT_EQ(header.tensors[1].dtype, "BF16");
  ASSERT_EQ(header.metadata.size(), 2u);  // transformers' loader refuses a file without "format": "pt"
  EXPECT_EQ(header.metadata[0], std::make_pair(std::string("format"), std::string("pt")));
  EXPECT_EQ(header.metadata[1], std::make_pair(std::string("tied"), std::string("w")));
  const checkpoint::TensorList read = checkpoint::WeightsReader(path).readAll();
  ASSERT_EQ(read.size(), 4u);
  EXPECT_TRUE(torch::equal(read[0].second, w));
  EXPECT_TRUE(torch::equal(read[1].second, b));
  EXPECT_EQ(read[3].second.item<std::int64_t>(), 7);

  const std::string pt = (scratch.path() / "x.pt").string();
  checkpoint::writeWeightsFile(pt, tensors);
  const checkpoint::TensorList back = checkpoint::WeightsReader(pt).readAll();
  ASSERT_EQ(back.size(), 5u);
  EXPECT_TRUE(torch::equal(back[4].second, w));
  const checkpoint::TensorList shared = checkpoint::readStateDict(pt);
  EXPECT_TRUE(torch::equal(shared[4].second, w));
  EXPECT_EQ(shared[0].second.data_ptr(), shared[4].second.data_ptr()) << "a tie's names share one tensor, as torch.load makes them";
}

// The spec's checks, each refused with what is wrong.
TEST_F(WeightsFile, MalformedSafetensorsAreRefused) {
  const std::string entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  EXPECT_EQ(refusal(safetensors("{" + entry + "}", 8)), "");
  EXPECT_NE(refusal(safetensors("{" + entry + "}", 8).substr(0, 20)).find("reaches past the file's end"), std::string::npos);
  std::string huge = safetensors("{}", 0);
  huge[5] = 1;  // 2^40 bytes of header
  EXPECT_NE(refusal(huge).find("more than the format's"), std::string::npos);
  EXPECT_NE(refusal(safetensors("{" + entry + "}", 4)).find("not within the 4 bytes of data"), std::string::npos);
  EXPECT_NE(refusal(safetensors("{" + entry + "}", 12)).find("cover 8 of the 12 bytes"), std::string::npos);
  EXPECT_NE(refusal(safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8))
                .find("a gap or an overlap"), std::string::npos);
  EXPECT_NE(refusal(safetensors(R"({"a":{"dtype":"F7","shape":[2],"data_offsets":[0,8]}})", 8))
                .find("dtype 'F7' is not one of the format's"), std::string::npos);
  EXPECT_NE(refusal(safetensors(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8))
                .find("holds 12 bytes, its data offsets 8"), std::string::npos);
  EXPECT_NE(refusal(safetensors("{" + entry + "," + entry + "}", 8)).find("the name 'a' twice"), std::string::npos);
  EXPECT_NE(refusal(safetensors(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8))
                .find("its shape is not of counts"), std::string::npos);
  EXPECT_NE(refusal(safetensors(R"({"a":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", 8))
                .find("pstrain reads F32"), std::string::npos);
  EXPECT_NE(refusal(safetensors(R"({"__metadata__":{"k":1}})", 0)).find("is not a string"), std::string::npos);
  EXPECT_NE(refusal("not a file of weights at all").find("neither torch.save's archive"), std::string::npos);
}

// A pickle's names: what torch.load(weights_only=True) takes makes values, anything else is
// refused before a single object of it is made; the list is exact (a name merely holding
// "int" or "float" is not a dtype).
TEST_F(WeightsFile, APickleNamingCodeIsRefused) {
  const auto fail = [](const std::string& what) { throw ConfigError(what); };
  const auto read = [&](const std::string& pickle) { return zip::readPickle(pickle, zip::PickleRules::Weights, nullptr, fail); };
  // {"a": OrderedDict()} with a _metadata BUILD, as Python pickles a state dict.
  const std::string ordered = std::string("\x80\x02}q\x00X\x01\x00\x00\x00" "a" "ccollections\nOrderedDict\nq\x01)Rq\x02}bs.", 46);
  const zip::Pickled top = read(ordered);
  ASSERT_EQ(top.kind(top.top()), zip::Pickled::Kind::Dict);
  ASSERT_EQ(top.items(top.top()).size(), 2u);
  EXPECT_EQ(top.kind(top.items(top.top())[1]), zip::Pickled::Kind::Dict);
  const auto refusal = [&](const std::string& pickle) {
    try {
      read(pickle);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(refusal(std::string("\x80\x02" "cposix\nsystem\nX\x02\x00\x00\x00lsR.", 25)).find("names posix.system"),
            std::string::npos);
  for (const char* name : {"int_repr", "from_file", "floatfunc", "set_printoptions"}) {
    EXPECT_NE(refusal(std::string("\x80\x02" "ctorch\n") + name + "\n)R.").find(std::string("names torch.") + name),
              std::string::npos) << name;
  }
  EXPECT_EQ(refusal("\x80\x02" "ctorch\nfloat32\n."), "");  // a dtype, as a value
  EXPECT_NE(refusal("\x80\x02" "ctorch\nfloat32\n)R.").find("not a function"), std::string::npos);
}

// A million nested tuples in 1 MB (or lists, or dicts) killed every rank with SIGSEGV when
// the values were freed recursively: every reader bounds nesting at kMaxNesting, and refuses
// it by name, the model file's check as the weights' reader.
TEST_F(WeightsFile, DeeplyNestedPicklesAreRefusedNotCrashed) {
  const std::string tuples = "\x80\x02)" + std::string(1000000, '\x85') + ".";
  const std::string lists = "\x80\x02" + std::string(100000, '(') + "N" + std::string(100000, 'l') + ".";
  using namespace std::string_literals;
  std::string dicts = "\x80\x02";
  for (int i = 0; i < 100000; ++i) dicts += "}X\x01\x00\x00\x00k"s;
  dicts += "N" + std::string(100000, 's') + ".";
  for (const std::string* pickle : std::vector<const std::string*>{&tuples, &lists, &dicts}) {
    for (const zip::PickleRules rules : {zip::PickleRules::Weights, zip::PickleRules::ModelFile}) {
      try {
        zip::readPickle(*pickle, rules, nullptr, [](const std::string& what) { throw ConfigError(what); });
        ADD_FAILURE() << "read";
      } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("nested more than 128 deep"), std::string::npos) << e.what();
      }
    }
  }
  // As a file of weights, and as a model file's data (before libtorch's unpickler sees it).
  const std::string archive = testsupport::zipOf({{"a/data.pkl", tuples}, {"a/version", "3\n"}});
  EXPECT_NE(refusal(archive).find("nested more than 128 deep"), std::string::npos) << refusal(archive);
  try {
    zip::checkArchive(archive, zip::ArchiveKind::ModelFile, [](const std::string& what) { throw ConfigError(what); });
    ADD_FAILURE() << "checked";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("nested more than"), std::string::npos) << e.what();
  }
  // A container changed once inside another would let its depth grow unseen: refused.
  const std::string changed = "\x80\x02]q\x00\x85h\x00Na."s;  // ([],), then [] gets None
  EXPECT_NE(refusal(testsupport::zipOf({{"a/data.pkl", changed}})).find("inside another value already"), std::string::npos);
  const std::string itself = refusal(testsupport::zipOf({{"a/data.pkl", "\x80\x02]q\x00h\x00" "a."s}}));
  EXPECT_NE(itself.find("holds itself"), std::string::npos) << itself;
}

// What a pickle makes is bounded by its size: one list of 8 M None (an 8 MB file) took each
// rank to 2.31 GB; now its values take at most kValueBytesPerByte a byte, and a state dict's
// a few bytes a byte.
TEST_F(WeightsFile, PickleValuesAreBoundedByThePickleSize) {
  const auto fail = [](const std::string& what) { throw ConfigError(what); };
  const std::string nones = "\x80\x02(" + std::string(8000000, 'N') + "l.";
  const zip::Pickled list = zip::readPickle(nones, zip::PickleRules::Weights, nullptr, fail);
  EXPECT_EQ(list.items(list.top()).size(), 8000000u);
  EXPECT_LE(list.valueBytes(), 10 * nones.size()) << list.valueBytes();
  EXPECT_NE(refusal(testsupport::zipOf({{"a/data.pkl", nones}})).find("not a dict of tensors"), std::string::npos);
  const std::string lists = "\x80\x02(" + std::string(4000000, ']') + "l.";  // a list each byte: 50 bytes a byte
  try {
    zip::readPickle(lists, zip::PickleRules::Weights, nullptr, fail);
    ADD_FAILURE() << "read";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("per byte of its"), std::string::npos) << e.what();
  }
  // A real state dict: measured.
  checkpoint::TensorList many;
  for (int i = 0; i < 2000; ++i) many.emplace_back(fmt::format("layers.{}.weight", i), torch::ones({2, 3}));
  const std::string pt = (scratch.path() / "many.pt").string();
  checkpoint::writeWeightsFile(pt, many);
  const std::string bytes = slurp(pt);
  const zip::ArchiveContents contents = zip::checkArchive(bytes, zip::ArchiveKind::Checkpoint, fail);
  const double perByte = static_cast<double>(contents.pickles.at("data").valueBytes()) /
                         static_cast<double>(contents.pickleBytes.at("data").size());
  std::printf("a state dict of 2000 tensors: %.2f bytes of values per byte of its pickle\n", perByte);
  EXPECT_LT(perByte, static_cast<double>(zip::kValueBytesPerByte) / 2);
}

// Sizes whose element count wraps in 64 bits ((2^20, 2^44) with strides (0, 0): 0
// elements by the wrap) passed the view check and the "4 times over" rule; libtorch then
// threw with a backtrace. Every count is checked against 2^62.
TEST_F(WeightsFile, ElementCountsThatOverflowAreRefused) {
  EXPECT_EQ(elementCount({1 << 20, std::int64_t(1) << 44}), std::nullopt);
  EXPECT_EQ(elementCount({std::int64_t(1) << 31, std::int64_t(1) << 31}), std::uint64_t(1) << 62);
  EXPECT_EQ(elementCount({std::int64_t(1) << 40, 0, std::int64_t(1) << 40}), 0u);
  EXPECT_TRUE(viewWithin(0, {1 << 20, std::int64_t(1) << 44}, {0, 0}, 1));
  EXPECT_FALSE(viewWithin(5, {}, {}, 5));
  EXPECT_FALSE(viewWithin(0, {2, 3}, {3, 1}, 5));
  EXPECT_TRUE(viewWithin(0, {2, 3}, {3, 1}, 6));
  // A state dict of one float whose tensor claims sizes (2^20, 2^44), strides (0, 0).
  using namespace std::string_literals;
  const auto text = [](const std::string& t) {
    std::string out = "X";
    for (int i = 0; i < 4; ++i) out += static_cast<char>(t.size() >> (8 * i) & 0xff);
    return out + t;
  };
  const std::string pickle = "\x80\x02}"s + text("w") + "ctorch._utils\n_rebuild_tensor_v2\n((" + text("storage") +
                             "ctorch\nFloatStorage\n" + text("0") + text("cpu") + "K\x01tQK\x00"s +
                             "J\x00\x00\x10\x00\x8a\x06\x00\x00\x00\x00\x00\x10\x86"s + "K\x00K\x00\x86\x89)tRs."s;
  const std::string archive = testsupport::zipOf({{"a/data.pkl", pickle}, {"a/data/0", std::string(4, '\0')}});
  EXPECT_NE(refusal(archive).find("more than 2^62 elements"), std::string::npos) << refusal(archive);
}

// A safetensors header whose strings are not UTF-8 is refused, and its raw bytes never reach
// the terminal; so is one nested deeper than any header.
TEST_F(WeightsFile, SafetensorsHeadersAreUtf8AndShallow) {
  const std::string bad = "{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
  std::string said = refusal(safetensors(bad, 4));
  EXPECT_NE(said.find("not UTF-8"), std::string::npos) << said;
  EXPECT_EQ(said.find('\xff'), std::string::npos);
  // UTF-8, but a terminal's control sequence (U+009B, CSI): never printed as it is.
  const std::string csi = "{\"a\xc2\x9b" "31m\":{\"dtype\":\"F7\",\"shape\":[1],\"data_offsets\":[0,4]}}";
  said = refusal(safetensors(csi, 4));
  EXPECT_NE(said.find("dtype 'F7'"), std::string::npos) << said;
  EXPECT_EQ(said.find("\xc2\x9b"), std::string::npos) << said;
  const std::string deep = "{\"__metadata__\":" + std::string(200, '[') + std::string(200, ']') + "}";
  EXPECT_NE(refusal(safetensors(deep, 0)).find("nested more than 128 deep"), std::string::npos);
  EXPECT_TRUE(zip::validUtf8("caf\xc3\xa9 \xf0\x9f\x98\x80"));
  EXPECT_FALSE(zip::validUtf8("\xc0\xaf"));        // an overlong '/'
  EXPECT_FALSE(zip::validUtf8("\xed\xa0\x80"));    // a surrogate
  EXPECT_FALSE(zip::validUtf8("\xf4\x90\x80\x80"));  // past U+10FFFF
}

// A pretrained state dict into a model: a tie needs one name; the adapters of a model with
// frozen weights may be missing; everything else wrong is listed in one refusal.
TEST_F(WeightsFile, PretrainedWeightsAreCheckedStrictly) {
  torch::jit::Module module("FineTune");
  const at::Tensor shared = torch::zeros({2, 2}).requires_grad_(), frozen = torch::zeros({2}),
                   adapter = torch::zeros({2}).requires_grad_();
  module.register_parameter("embed", shared, false);
  module.register_parameter("head", shared, false);
  module.register_parameter("base", frozen, false);
  module.register_parameter("lora", adapter, false);
  module.define("def forward(self, x):\n    return x.mm(self.embed).mm(self.head) + self.base + self.lora\n");
  const std::string path = (scratch.path() / "finetune.pt").string();
  module.save(path);
  auto net = models::makeModel(path);
  const at::Tensor e = torch::randn({2, 2}), f = torch::randn({2});
  const auto load = [&](const checkpoint::TensorList& tensors, const char* name) {
    const std::string file = (scratch.path() / name).string();
    checkpoint::writeWeightsFile(file, tensors);
    return models::loadPretrained(*net, checkpoint::WeightsReader(file), "pre");
  };
  const auto refusedBy = [&](const checkpoint::TensorList& tensors, const char* name) {
    try {
      load(tensors, name);
    } catch (const ConfigError& error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  const models::Pretrained loaded = load({{"head", e}, {"base", f.to(torch::kHalf)}}, "pre.safetensors");
  EXPECT_EQ(loaded.kept, std::vector<std::string>{"lora"});
  EXPECT_NE(loaded.identity.find("of its structure and frozen weights"), std::string::npos) << loaded.identity;
  const auto state = models::stateDict(*net);
  EXPECT_TRUE(torch::equal(state[0].second, e));
  EXPECT_TRUE(torch::equal(state[3].second, state[0].second));
  EXPECT_TRUE(torch::allclose(state[2].second, f.to(torch::kHalf).to(torch::kFloat)));
  // Another base is another identity; the same base another time, the same.
  EXPECT_NE(load({{"head", e}, {"base", f + 1}}, "other.safetensors").identity,
            load({{"head", e}, {"base", f}}, "same.safetensors").identity);
  EXPECT_EQ(load({{"head", e + 1}, {"base", f}}, "same.safetensors").identity,
            load({{"head", e}, {"base", f}}, "same.safetensors").identity);
  std::string what = refusedBy({{"embed", e}, {"head", e + 1}, {"base", torch::zeros({3})}, {"extra", f}}, "bad.pt");
  EXPECT_NE(what.find("unexpected (1): extra"), std::string::npos) << what;
  EXPECT_NE(what.find("base is [3], the model's [2]"), std::string::npos) << what;
  what = refusedBy({{"embed", e}, {"head", e + 1}, {"base", f}}, "unequal.pt");
  EXPECT_NE(what.find("unequal in the file (1): embed and head"), std::string::npos) << what;
  // nanoGPT's ckpt.pt of a compiled model may hold both X and _orig_mod.X: torch.load and
  // nanoGPT's resume would take the other one; pstrain asks.
  what = refusedBy({{"embed", e}, {"_orig_mod.embed", e + 1}, {"base", f}}, "twice.pt");
  EXPECT_NE(what.find("named twice (1): embed (as embed and _orig_mod.embed)"), std::string::npos) << what;
}

// A pickle whose dict sets one name twice: torch.load keeps the last, pstrain refuses it.
TEST_F(WeightsFile, AStateDictThatNamesATensorTwiceIsRefused) {
  const checkpoint::TensorList tensors = {{"w", torch::ones({2})}, {"v", torch::zeros({2})}};
  const std::string pt = (scratch.path() / "twice.pt").string();
  checkpoint::writeWeightsFile(pt, tensors);
  std::string bytes = slurp(pt);
  // The second name, "v", becomes "w" in data.pkl (same length: the archive stays sound, but
  // for its CRC, which torch's writers and readers do not check here).
  const std::size_t at = bytes.find(std::string("X\x01\x00\x00\x00v", 6));
  ASSERT_NE(at, std::string::npos);
  bytes[at + 5] = 'w';
  const std::string said = refusal(bytes);
  EXPECT_NE(said.find("names 'w' twice"), std::string::npos) << said;
}

// --weight-decay-scope matrices: the spans of the tensors of 2+ dimensions, cut to a range.
TEST(MatrixSpans, AreTheTensorsOfTwoDimensionsOrMoreCutToARange) {
  const codec::Shapes shapes = {{4, 2}, {2}, {3, 3, 1}, {5}, {2, 2}};  // 0-8, 8-10, 10-19, 19-24, 24-28
  EXPECT_EQ(optim::matrixSpans(shapes), (optim::Spans{{0, 8}, {10, 19}, {24, 28}}));
  EXPECT_EQ(optim::matrixSpans(shapes, 5, 21), (optim::Spans{{0, 3}, {5, 14}}));
  EXPECT_EQ(optim::matrixSpans({{3}, {3}}), optim::Spans{});
  EXPECT_EQ(optim::matrixSpans({{2, 2}, {1, 3}}), (optim::Spans{{0, 7}}));  // adjacent: one span
}
