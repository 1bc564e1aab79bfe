// The step's wire format (runtime/protocol/StepProtocol): numbers from the network checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

#include "runtime/Errors.h"
#include "runtime/protocol/Handshake.h"
#include "runtime/protocol/StepProtocol.h"

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
