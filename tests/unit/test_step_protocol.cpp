// The step's wire format (runtime/protocol/StepProtocol): numbers from the network checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "runtime/Errors.h"
#include "runtime/protocol/Handshake.h"
#include "runtime/protocol/StepProtocol.h"
#include "tests/common/Ranks.h"

using namespace pstrain;

// Numbers in a trailer come from the network: only a whole step number becomes one.
TEST(StepProtocol, TrailerNumbersAreCheckedBeforeUse) {
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

// A value (a path, a host name) with a newline or backslash comes back as it was, and can
// add no fact of its own.
TEST(Handshake, ValuesAreEscapedOnTheWire) {
  const protocol::Facts facts = {{"dataset", "/data/x\nmodel=evil"}, {"path", "C:\\dir\\n"}, {"model", "lenet"}};
  const std::string wire = protocol::encodeFacts(facts);
  EXPECT_EQ(std::count(wire.begin(), wire.end(), '\n'), 3);
  const auto back = protocol::decodeFacts(wire, 1);
  EXPECT_EQ(back.size(), 3u);
  EXPECT_EQ(back.at("dataset"), "/data/x\nmodel=evil");
  EXPECT_EQ(back.at("path"), "C:\\dir\\n");
  EXPECT_EQ(back.at("model"), "lenet");
  EXPECT_THROW(protocol::decodeFacts("a=b\\x\n", 1), CommError);
  EXPECT_THROW(protocol::decodeFacts("a=b\\", 1), CommError);
}

// Every fact that a rank states is compared, an empty one too: a host whose --config lacks
// --init-from states no file (an empty identity) and trained on its model file's frozen
// weights, 0.11 off the others', while the handshake skipped it. A fact a rank leaves out
// (a server has no data set) is not compared; the same field is named on every rank.
TEST(Handshake, AnEmptyFactIsComparedAndALeftOutOneIsNot) {
  comm::InProcessWorld world(3);
  std::vector<std::string> said(3);
  const auto errors = testsupport::runRanks(world, [&](int r) {
    protocol::Facts facts = {{"model", "gpt.pt"}, {"init-from-file", r == 2 ? "" : "crc32 1234abcd, 10 bytes"},
                             {"info.init-from-file", r == 2 ? "" : "base.safetensors"}};
    if (r > 0) facts.emplace_back("train-samples", "100");
    try {
      protocol::handshake(world.rank(r), facts);
    } catch (const CollectiveConfigError& e) {
      said[static_cast<std::size_t>(r)] = e.what();
    }
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(errors[static_cast<std::size_t>(r)], "");
    EXPECT_EQ(said[static_cast<std::size_t>(r)],
              "ranks disagree on 'init-from-file': 'crc32 1234abcd, 10 bytes' (base.safetensors) on rank 0 but nothing "
              "on rank 2; start every rank with the same flags, binary and data");
  }
  comm::InProcessWorld agreed(3);
  const auto none = testsupport::runRanks(agreed, [&](int r) {
    protocol::Facts facts = {{"model", "gpt.pt"}, {"init-from-file", ""}};
    if (r > 0) facts.emplace_back("train-samples", std::to_string(100));
    if (r == 0) facts.emplace_back("resolved-virtual-shards", "2");
    protocol::handshake(agreed.rank(r), facts);
  });
  EXPECT_EQ(none, std::vector<std::string>(3));
}
