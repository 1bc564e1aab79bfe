#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <thread>

#include "runtime/comm/Doorbell.h"

using namespace pstrain::comm;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

// Two doorbells that know each other, as ranks 0 and 1.
struct Pair {
  Doorbell zero, one;
  Pair() {
    const std::vector<std::string> addresses{zero.address(), one.address()};
    zero.connect(addresses, 0);
    one.connect(addresses, 1);
  }
};

}  // namespace

TEST(Doorbell, AddressIsAPortAndIpv4Addresses) {
  Doorbell bell;
  std::istringstream in(bell.address());
  int port = 0;
  ASSERT_TRUE(in >> port) << bell.address();
  EXPECT_GT(port, 0);
  int addresses = 0;
  for (std::string a; in >> a; ++addresses) EXPECT_EQ(std::count(a.begin(), a.end(), '.'), 3) << a;
  EXPECT_GE(addresses, 1);
}

// A ring from another thread ends a long sleep early (the bound is loose on purpose: it
// only tells "woken" from "slept the whole 20 s").
TEST(Doorbell, RingEndsTheSleepOfThePeer) {
  Pair pair;
  std::thread ringer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    pair.zero.ring(1);
  });
  const auto start = Clock::now();
  EXPECT_TRUE(pair.one.sleep(std::chrono::seconds(20)));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  ringer.join();
}

TEST(Doorbell, UnrungSleepLastsItsPauseAndRingsAreConsumedAtOnce) {
  Pair pair;
  auto start = Clock::now();
  EXPECT_FALSE(pair.one.sleep(milliseconds(30)));
  EXPECT_GE(Clock::now() - start, milliseconds(30));
  for (int i = 0; i < 5; ++i) pair.zero.ring(1);
  std::this_thread::sleep_for(milliseconds(50));  // let them all arrive
  EXPECT_TRUE(pair.one.sleep(std::chrono::seconds(20)));
  EXPECT_FALSE(pair.one.sleep(milliseconds(1)));  // one wake-up for all five
  EXPECT_FALSE(pair.zero.sleep(milliseconds(1)));  // a ring reaches only its rank
}

// Addresses come from other ranks: whatever they hold, ringing is harmless.
TEST(Doorbell, MalformedOrMissingAddressesOnlyDropRings) {
  Pair pair;
  pair.zero.connect({"", "garbage", "70000 127.0.0.1", "123 not-an-address", pair.one.address()}, 0);
  for (int rank : {-1, 0, 1, 2, 3, 4, 99}) pair.zero.ring(rank);
  EXPECT_TRUE(pair.one.sleep(std::chrono::seconds(20)));  // rank 4 is `one`
}

// A rank trusts its doorbell once every other rank's ring has reached it; rings from ranks
// it does not know, and datagrams that are not rings, wake it but prove nothing.
TEST(Doorbell, HearsEveryoneOnlyAfterARingFromEachOtherRank) {
  Pair pair;
  EXPECT_FALSE(Doorbell().hearsEveryone());  // not connected
  EXPECT_FALSE(pair.one.hearsEveryone());

  Doorbell stranger;  // rings as rank 7 of a bigger job
  stranger.connect({"", "", "", "", "", "", "", "", pair.one.address()}, 7);
  stranger.ring(8);
  const int raw = ::socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(raw, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(std::stoi(pair.one.address())));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const std::uint32_t zeroTooLong[2] = {0, 0};  // rank 0's number, but not a ring
  ASSERT_EQ(::sendto(raw, zeroTooLong, sizeof zeroTooLong, 0, reinterpret_cast<const sockaddr*>(&to), sizeof to),
            static_cast<ssize_t>(sizeof zeroTooLong));
  ::close(raw);
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_TRUE(pair.one.sleep(std::chrono::seconds(20)));
  EXPECT_FALSE(pair.one.hearsEveryone());

  pair.zero.ring(1);
  EXPECT_TRUE(pair.one.sleep(std::chrono::seconds(20)));
  EXPECT_TRUE(pair.one.hearsEveryone());
  EXPECT_FALSE(pair.zero.hearsEveryone());  // nobody rang rank 0
}
