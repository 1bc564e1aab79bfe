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

const Doorbell::Key kKey{0x0123456789abcdefull, 0xfedcba9876543210ull};

// Two doorbells that know each other, as ranks 0 and 1 of a job.
struct Pair {
  Doorbell zero, one;
  Pair() {
    const std::vector<std::string> addresses{zero.address(), one.address()};
    zero.connect(addresses, 0, kKey);
    one.connect(addresses, 1, kKey);
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
  pair.zero.connect({"", "garbage", "70000 127.0.0.1", "123 not-an-address", pair.one.address()}, 0, kKey);
  pair.one.connect({"", "", "", "", pair.one.address()}, 4, kKey);
  for (int rank : {-1, 0, 1, 2, 3, 4, 99}) pair.zero.ring(rank);
  EXPECT_TRUE(pair.one.sleep(std::chrono::seconds(20)));  // rank 4 is `one`
}

// SipHash-2-4's reference vectors (the paper's appendix A; the first of its vectors.h).
TEST(Doorbell, SipHashReferenceVectors) {
  const Doorbell::Key key{0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};  // bytes 00..0f, little-endian
  unsigned char message[15];
  for (int i = 0; i < 15; ++i) message[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(Doorbell::sipHash24(key, message, 15), 0xa129ca6149be45e5ull);
  EXPECT_EQ(Doorbell::sipHash24(key, message, 0), 0x726fdb47dd0e0e31ull);
}

// A ring is a rank of the job, a counter and their MAC, with the rank rung, under the job's
// key; nothing else parses, and a ring for one rank does not parse at another.
TEST(Doorbell, RingsCarryARankACounterAndTheirMac) {
  unsigned char ring[Doorbell::kRingBytes];
  Doorbell::encodeRing(kKey, {3, 41}, 2, ring);
  const auto parsed = Doorbell::parseRing(ring, sizeof ring, kKey, 4, 2);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->rank, 3u);
  EXPECT_EQ(parsed->counter, 41u);
  EXPECT_FALSE(Doorbell::parseRing(ring, sizeof ring, kKey, 4, 1));                         // rung at another rank
  EXPECT_FALSE(Doorbell::parseRing(ring, sizeof ring, kKey, 3, 2));                         // no such rank
  EXPECT_FALSE(Doorbell::parseRing(ring, sizeof ring, {kKey.k0, kKey.k1 ^ 1}, 4, 2));       // another job's key
  EXPECT_FALSE(Doorbell::parseRing(ring, sizeof ring - 1, kKey, 4, 2));                     // too short
  unsigned char longer[Doorbell::kRingBytes + 1] = {};
  std::copy(ring, ring + sizeof ring, longer);
  EXPECT_FALSE(Doorbell::parseRing(longer, sizeof longer, kKey, 4, 2));
  for (std::size_t byte = 0; byte < sizeof ring; ++byte) {  // any bit changed: the MAC fails
    unsigned char forged[Doorbell::kRingBytes];
    std::copy(ring, ring + sizeof ring, forged);
    forged[byte] ^= 0x10;
    EXPECT_FALSE(Doorbell::parseRing(forged, sizeof forged, kKey, 1u << 31, 2)) << "byte " << byte;
  }
}

// A captured ring sent again wakes nobody: its counter is not newer than its ringer's
// last. Forged rings (another key, a counter changed without the MAC) neither, nor a ring
// that rank 0 rang at another rank (with a counter newer than any rank 1 has seen).
TEST(Doorbell, ReplayedAndForgedRingsDoNotWake) {
  Pair pair;
  unsigned char ring[Doorbell::kRingBytes];
  Doorbell::encodeRing(kKey, {0, 5}, 1, ring);  // as rank 0's fifth ring, at rank 1
  sendRaw(pair.one, ring, sizeof ring);
  EXPECT_TRUE(pair.one.sleep(std::chrono::seconds(20)));
  sendRaw(pair.one, ring, sizeof ring, 20);  // replayed
  unsigned char older[Doorbell::kRingBytes], otherKey[Doorbell::kRingBytes], bumped[Doorbell::kRingBytes],
      elsewhere[Doorbell::kRingBytes];
  Doorbell::encodeRing(kKey, {0, 4}, 1, older);
  Doorbell::encodeRing({kKey.k0 + 1, kKey.k1}, {0, 99}, 1, otherKey);
  Doorbell::encodeRing(kKey, {0, 50}, 2, elsewhere);  // rank 0 rang rank 2
  std::copy(ring, ring + sizeof ring, bumped);
  bumped[11] ^= 0x40;  // the counter's last byte: 5 -> 69, the MAC left
  for (const unsigned char* forged : {older, otherKey, bumped, elsewhere}) {
    sendRaw(pair.one, forged, Doorbell::kRingBytes);
  }
  std::this_thread::sleep_for(milliseconds(50));
  const auto start = Clock::now();
  EXPECT_FALSE(pair.one.sleep(milliseconds(40)));
  EXPECT_GE(Clock::now() - start, milliseconds(40));
  Doorbell::encodeRing(kKey, {0, 6}, 1, ring);  // the next ring
  sendRaw(pair.one, ring, sizeof ring);
  EXPECT_TRUE(pair.one.sleep(std::chrono::seconds(20)));
}

// A job on one host listens on the loopback alone; otherwise on each selected address,
// never on the wildcard address.
TEST(Doorbell, ListensOnlyWherePeersRing) {
  Doorbell local({}, true, true);
  std::istringstream in(local.address());
  int port = 0;
  std::string only, more;
  ASSERT_TRUE(in >> port >> only) << local.address();
  EXPECT_EQ(only, "127.0.0.1");
  EXPECT_FALSE(in >> more);
  Doorbell loopbackOnly(Doorbell::Interfaces{"lo", ""});
  EXPECT_NE(loopbackOnly.address().find(" 127.0.0.1"), std::string::npos) << loopbackOnly.address();
  // Open MPI's own reading once --mca btl_tcp_if_include lo is given (MPI_T shows both):
  // the include list wins, as in its TCP transport.
  Doorbell asOpenMpiReadsIt(Doorbell::Interfaces{"lo", "127.0.0.1/8,sppp"});
  EXPECT_NE(asOpenMpiReadsIt.address().find(" 127.0.0.1"), std::string::npos) << asOpenMpiReadsIt.address();
  Doorbell none(Doorbell::Interfaces{"no-such-interface0", ""});
  EXPECT_EQ(none.address(), "");  // nothing selected: no socket, rings dropped
  Doorbell every;
  EXPECT_EQ(every.address().find(" 0.0.0.0"), std::string::npos) << every.address();
}

// A rank trusts its doorbell once every other rank's ring has reached it; forged rings
// (another key), rings of ranks it does not know and other datagrams neither wake it nor
// count.
TEST(Doorbell, HearsEveryoneOnlyAfterARingFromEachOtherRank) {
  Pair pair;
  EXPECT_FALSE(Doorbell().hearsEveryone());  // not connected
  EXPECT_FALSE(pair.one.hearsEveryone());
  unsigned char forged[Doorbell::kRingBytes], stranger[Doorbell::kRingBytes];
  Doorbell::encodeRing({kKey.k0 ^ 1, kKey.k1}, {0, 1}, 1, forged);
  Doorbell::encodeRing(kKey, {7, 1}, 1, stranger);
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
