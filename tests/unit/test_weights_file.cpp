// Weights from elsewhere and for elsewhere (checkpoint/WeightsFile, Safetensors,
// zip/WeightsPickle, models::loadPretrained): the formats by their specs, every malformed
// file a ConfigError naming it, a pretrained state dict's names and shapes held strictly.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <fstream>
#include <string>

#include "models/Registry.h"
#include "runtime/Errors.h"
#include "runtime/checkpoint/Safetensors.h"
#include "runtime/checkpoint/WeightsFile.h"
#include "runtime/optim/MatrixSpans.h"
#include "runtime/zip/WeightsPickle.h"
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
  const checkpoint::SafetensorsHeader header =
      checkpoint::readSafetensorsHeader(bytes, [](const std::string& what) { throw ConfigError(what); });
  EXPECT_EQ(header.dataStart % 8, 0u);
  ASSERT_EQ(header.tensors.size(), 4u);
  EXPECT_EQ(header.tensors[1].dtype, "BF16");
  ASSERT_EQ(header.metadata.size(), 1u);
  EXPECT_EQ(header.metadata[0], std::make_pair(std::string("tied"), std::string("w")));
  const checkpoint::WeightsFile read = checkpoint::readWeightsFile(path);
  ASSERT_EQ(read.tensors.size(), 4u);
  EXPECT_TRUE(torch::equal(read.tensors[0].second, w));
  EXPECT_TRUE(torch::equal(read.tensors[1].second, b));
  EXPECT_EQ(read.tensors[3].second.item<std::int64_t>(), 7);
  EXPECT_NE(read.identity.find("crc32 "), std::string::npos);

  const std::string pt = (scratch.path() / "x.pt").string();
  checkpoint::writeWeightsFile(pt, tensors);
  const checkpoint::TensorList back = checkpoint::readWeightsFile(pt).tensors;
  ASSERT_EQ(back.size(), 5u);
  EXPECT_TRUE(torch::equal(back[4].second, w));
  const checkpoint::TensorList shared = checkpoint::readStateDict(pt);  // libtorch's reader keeps storages shared
  EXPECT_EQ(shared[0].second.data_ptr(), shared[4].second.data_ptr()) << "a tie's names share one storage";
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
                .find("a negative number"), std::string::npos);
  EXPECT_NE(refusal(safetensors(R"({"a":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", 8))
                .find("pstrain reads F32"), std::string::npos);
  EXPECT_NE(refusal(safetensors(R"({"__metadata__":{"k":1}})", 0)).find("is not a string"), std::string::npos);
  EXPECT_NE(refusal("not a file of weights at all").find("neither torch.save's archive"), std::string::npos);
}

// A pickle's names: what torch.load(weights_only=True) takes makes values, anything else is
// refused before a single object of it is made.
TEST_F(WeightsFile, APickleNamingCodeIsRefused) {
  const auto fail = [](const std::string& what) { throw ConfigError(what); };
  // {"a": OrderedDict()} with a _metadata BUILD, as Python pickles a state dict.
  const std::string ordered = std::string("\x80\x02}q\x00X\x01\x00\x00\x00" "a" "ccollections\nOrderedDict\nq\x01)Rq\x02}bs.", 46);
  const auto top = zip::readWeightsPickle(ordered, fail);
  ASSERT_EQ(top->kind, zip::PickleValue::Kind::Dict);
  ASSERT_EQ(top->items.size(), 2u);
  EXPECT_EQ(top->items[1]->kind, zip::PickleValue::Kind::Dict);
  const std::string system = std::string("\x80\x02" "cposix\nsystem\nX\x02\x00\x00\x00lsR.", 25);
  try {
    zip::readWeightsPickle(system, fail);
    ADD_FAILURE() << "posix.system accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("names posix.system"), std::string::npos) << e.what();
  }
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
  const auto kept = models::loadPretrained(*net, {{"head", e}, {"base", f.to(torch::kHalf)}}, "pre");
  EXPECT_EQ(kept, std::vector<std::string>{"lora"});
  const auto state = models::stateDict(*net);
  EXPECT_TRUE(torch::equal(state[0].second, e));
  EXPECT_TRUE(torch::equal(state[3].second, state[0].second));
  EXPECT_TRUE(torch::allclose(state[2].second, f.to(torch::kHalf).to(torch::kFloat)));
  try {
    models::loadPretrained(*net, {{"embed", e}, {"head", e + 1}, {"base", torch::zeros({3})}, {"extra", f}}, "pre");
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("unexpected (1): extra"), std::string::npos) << what;
    EXPECT_NE(what.find("base is [3], the model's [2]"), std::string::npos) << what;
    EXPECT_NE(what.find("unequal in the file (1): embed and head"), std::string::npos) << what;
  }
}

// --weight-decay-scope matrices: the spans of the tensors of 2+ dimensions, cut to a range.
TEST(MatrixSpans, AreTheTensorsOfTwoDimensionsOrMoreCutToARange) {
  const codec::Shapes shapes = {{4, 2}, {2}, {3, 3, 1}, {5}, {2, 2}};  // 0-8, 8-10, 10-19, 19-24, 24-28
  EXPECT_EQ(optim::matrixSpans(shapes), (optim::Spans{{0, 8}, {10, 19}, {24, 28}}));
  EXPECT_EQ(optim::matrixSpans(shapes, 5, 21), (optim::Spans{{0, 3}, {5, 14}}));
  EXPECT_EQ(optim::matrixSpans({{3}, {3}}), optim::Spans{});
  EXPECT_EQ(optim::matrixSpans({{2, 2}, {1, 3}}), (optim::Spans{{0, 7}}));  // adjacent: one span
}
