#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <ctime>
#include <optional>
#include <chrono>
#include <sstream>
#include <thread>

#include "runtime/comm/Doorbell.h"

using namespace pstrain::comm;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

constexpr std::uint64_t kToken = 0x0123456789abcdefull;

// Two doorbells that know each other, as ranks 0 and 1 of a job.
struct Pair {
  Doorbell zero, one;
  Pair() {
    const std::vector<std::string> addresses{zero.address(), one.address()};
    zero.connect(addresses, 0, kToken);
    one.connect(addresses, 1, kToken);
  }
};

// Sends `count` datagrams of `bytes` to where `bell` listens (its first address).
void sendRaw(const Doorbell& bell, const void* bytes, std::size_t size, int count = 1) {
  std::istringstream in(bell.address());
  int port = 0;
  std::string host;
  ASSERT_TRUE(in >> port >> host);
  const int raw = ::socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(raw, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(port));
  ASSERT_EQ(::inet_pton(AF_INET, host.c_str(), &to.sin_addr), 1);
  for (int i = 0; i < count; ++i) ::sendto(raw, bytes, size, 0, reinterpret_cast<const sockaddr*>(&to), sizeof to);
  ::close(raw);
}

double cpuSeconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

}  // namespace

TEST(Doorbell, ReductionsRingTheirParentInTheBinomialTree) {
  // Root 0 of 8: 1, 2, 4 send to the root; 3 to 2; 5 and 6 to 4; 7 to 6.
  const std::vector<int> parents = {-1, 0, 0, 2, 0, 4, 4, 6};
  for (int r = 0; r < 8; ++r) EXPECT_EQ(Doorbell::treeParent(r, 0, 8), parents[r]) << r;
  // Root 3 of 5: the same tree over relative ranks (rank 3 + relative, mod 5).
  EXPECT_EQ(Doorbell::treeParent(3, 3, 5), -1);
  EXPECT_EQ(Doorbell::treeParent(4, 3, 5), 3);  // relative 1
  EXPECT_EQ(Doorbell::treeParent(1, 3, 5), 0);  // relative 3 -> 2, rank 0
  EXPECT_EQ(Doorbell::treeParent(2, 3, 5), 3);  // relative 4 -> 0
}

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
  pair.zero.connect({"", "garbage", "70000 127.0.0.1", "123 not-an-address", pair.one.address()}, 0, kToken);
  pair.one.connect({"", "", "", "", pair.one.address()}, 4, kToken);
  for (int rank : {-1, 0, 1, 2, 3, 4, 99}) pair.zero.ring(rank);
  EXPECT_TRUE(pair.one.sleep(std::chrono::seconds(20)));  // rank 4 is `one`
}

// A ring is the job's token and a rank of the job; nothing else wakes a rank or counts.
TEST(Doorbell, RingsCarryTheTokenAndARankOfTheJob) {
  unsigned char ring[Doorbell::kRingBytes];
  Doorbell::encodeRing(kToken, 3, ring);
  EXPECT_EQ(Doorbell::parseRing(ring, sizeof ring, kToken, 4), std::optional<std::uint32_t>(3));
  EXPECT_EQ(Doorbell::parseRing(ring, sizeof ring, kToken, 3), std::nullopt);       // no such rank
  EXPECT_EQ(Doorbell::parseRing(ring, sizeof ring, kToken + 1, 4), std::nullopt);   // another job
  EXPECT_EQ(Doorbell::parseRing(ring, sizeof ring - 1, kToken, 4), std::nullopt);   // too short
  unsigned char longer[Doorbell::kRingBytes + 1] = {};
  std::copy(ring, ring + sizeof ring, longer);
  EXPECT_EQ(Doorbell::parseRing(longer, sizeof longer, kToken, 4), std::nullopt);
}

// A rank trusts its doorbell once every other rank's ring has reached it; forged rings
// (another token), rings of ranks it does not know and other datagrams neither wake it
// nor count.
TEST(Doorbell, HearsEveryoneOnlyAfterARingFromEachOtherRank) {
  Pair pair;
  EXPECT_FALSE(Doorbell().hearsEveryone());  // not connected
  EXPECT_FALSE(pair.one.hearsEveryone());
  unsigned char forged[Doorbell::kRingBytes], stranger[Doorbell::kRingBytes];
  Doorbell::encodeRing(kToken ^ 1, 0, forged);
  Doorbell::encodeRing(kToken, 7, stranger);
  const std::uint32_t notARing[2] = {0, 0};
  sendRaw(pair.one, forged, sizeof forged);
  sendRaw(pair.one, stranger, sizeof stranger);
  sendRaw(pair.one, notARing, sizeof notARing);
  std::this_thread::sleep_for(milliseconds(50));
  const auto start = Clock::now();
  EXPECT_FALSE(pair.one.sleep(milliseconds(40)));
  EXPECT_GE(Clock::now() - start, milliseconds(40));  // strays do not end the sleep
  EXPECT_FALSE(pair.one.hearsEveryone());

  pair.zero.ring(1);
  EXPECT_TRUE(pair.one.sleep(std::chrono::seconds(20)));
  EXPECT_TRUE(pair.one.hearsEveryone());
  EXPECT_FALSE(pair.zero.hearsEveryone());  // nobody rang rank 0
}

// A flood of datagrams: each sleep reads at most kMaxDrain of them and then sleeps out its
// pause, so the rank neither spins nor stops polling (its sleeps return on time).
TEST(Doorbell, AFloodNeitherSpinsTheRankNorKeepsItFromPolling) {
  Pair pair;
  unsigned char junk[Doorbell::kRingBytes] = {1, 2, 3};
  std::atomic<bool> flooding{true};
  std::thread flood([&] {
    while (flooding) sendRaw(pair.one, junk, sizeof junk, 200);
  });
  std::this_thread::sleep_for(milliseconds(20));
  const double cpuStart = cpuSeconds();
  const auto start = Clock::now();
  int sleeps = 0;
  while (Clock::now() - start < milliseconds(500)) {
    EXPECT_FALSE(pair.one.sleep(milliseconds(5)));
    ++sleeps;
  }
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  flooding = false;
  flood.join();
  // The flooder's CPU counts too (same process): compare with the sleeps' share only
  // through their number, which a spinning doorbell would multiply.
  EXPECT_LE(sleeps, 110) << "a sleep of 5 ms returned early under the flood";
  EXPECT_GE(sleeps, 50) << "sleeps blocked far longer than asked";
  std::printf("flood: %d sleeps of 5 ms in %.3f s, process CPU %.3f s\n", sleeps, wall, cpuSeconds() - cpuStart);
  // After the flood, rings work again once the junk queued in the socket is read (at most
  // kMaxDrain per sleep; the kernel queues a few hundred datagrams at most, and drops a
  // ring that finds its queue full: a hint lost).
  for (int i = 0; i < 50; ++i) pair.one.sleep(milliseconds(1));
  pair.zero.ring(1);
  EXPECT_TRUE(pair.one.sleep(std::chrono::seconds(20)));
}
