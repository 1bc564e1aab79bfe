// The host's interfaces (runtime/net), the timed TCP path, and the probe's choice of the
// fastest subnet (runtime/probe/NetworkMap).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "runtime/net/Interfaces.h"
#include "runtime/net/LinkTimer.h"
#include "runtime/probe/NetworkMap.h"

namespace pstrain {
namespace {

in_addr address(const char* text) {
  in_addr a{};
  EXPECT_TRUE(net::parseAddress(text, a)) << text;
  return a;
}

TEST(Network, SubnetsAndTheirDescriptionRoundTrip) {
  EXPECT_EQ(net::subnetOf(address("198.18.78.3"), address("255.255.255.0")), "198.18.78.0/24");
  EXPECT_EQ(net::subnetOf(address("169.254.12.7"), address("255.255.0.0")), "169.254.0.0/16");
  net::Interface wifi{"en0", address("192.168.1.20"), address("255.255.255.0"), "wifi", 0, false};
  net::Interface bridge{"bridge0", address("10.0.1.2"), address("255.255.255.252"), "thunderbolt", 40000, false};
  const auto back = net::parseDescription(net::describe({wifi, bridge}) + "garbage line\n");
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].name, "en0");
  EXPECT_EQ(back[0].kind, "wifi");
  EXPECT_EQ(net::subnetOf(back[1].address, back[1].netmask), "10.0.1.0/30");
  EXPECT_EQ(back[1].megabitsPerSecond, 40000);
  EXPECT_TRUE(net::matches({"10.0.1.0/24"}, "bridge0", back[1].address));
  EXPECT_TRUE(net::matches({"en1", "bridge0"}, "bridge0", back[1].address));
  EXPECT_FALSE(net::matches({"192.168.1.0/24"}, "bridge0", back[1].address));
}

TEST(Network, TheLoopbackIsListedAsSuch) {
  bool loopback = false;
  for (const auto& i : net::localInterfaces()) {
    if (net::dotted(i.address) == "127.0.0.1") loopback = i.loopback && i.kind == "loopback";
  }
  EXPECT_TRUE(loopback);
}

// A listener on the loopback with the job's token, taking one timed transfer on a thread of
// its own: `received` is what it counted, once join() has returned.
struct TimedReceiver {
  TimedReceiver() : receiver([this] { received = listener.receiveOne(token, std::chrono::seconds(10)); }) {}
  ~TimedReceiver() {
    if (receiver.joinable()) receiver.join();  // a failed assertion returns early
  }
  void join() { receiver.join(); }

  const in_addr local = address("127.0.0.1");
  net::LinkListener listener{local};
  const net::LinkToken token = net::randomLinkToken();
  std::size_t received = 0;
  std::thread receiver;
};

TEST(Network, ATimedTransferCountsWhatArrived) {
  TimedReceiver r;
  ASSERT_GT(r.listener.port(), 0);
  const in_addr local = r.local;
  const net::LinkToken token = r.token;
  const double rate = net::timeSend(local, local, r.listener.port(), token, 8 << 20, std::chrono::seconds(5));
  r.join();
  EXPECT_EQ(r.received, std::size_t(8) << 20);
  EXPECT_GT(rate, 1e6);
  // Nobody listening: no rate, and no waiting out the timeout.
  int port = 0;
  {
    net::LinkListener gone(local);
    port = gone.port();
  }
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(net::timeSend(local, local, port, token, 1 << 20, std::chrono::seconds(3)), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// Another local process that connects first (hardening IV, finding 8: it zeroed a worker's
// measure and steered the recommendation) is not the sender: without the job's token its
// connection is closed and not counted, and the real sender's transfer is measured.
TEST(Network, AConnectionWithoutTheTokenIsNotTheSender) {
  TimedReceiver r;
  ASSERT_GT(r.listener.port(), 0);
  net::LinkToken wrong = r.token;
  wrong[0] ^= 1;
  EXPECT_EQ(net::timeSend(r.local, r.local, r.listener.port(), wrong, 1 << 20, std::chrono::seconds(3)), 0);
  const double rate = net::timeSend(r.local, r.local, r.listener.port(), r.token, 4 << 20, std::chrono::seconds(5));
  r.join();
  EXPECT_EQ(r.received, std::size_t(4) << 20);
  EXPECT_GT(rate, 1e6);
}

TEST(Network, SharedSubnetsAreThoseThatJoinTheTwoHosts) {
  net::Interface wifi0{"en0", address("192.168.1.10"), address("255.255.255.0"), "wifi", 0, false};
  net::Interface docker0{"docker0", address("172.17.0.1"), address("255.255.0.0"), "bridge", 0, false};
  net::Interface wifi1{"en0", address("192.168.1.11"), address("255.255.255.0"), "wifi", 0, false};
  net::Interface docker1{"docker0", address("172.17.0.1"), address("255.255.0.0"), "bridge", 0, false};
  net::Interface bridge1{"bridge0", address("169.254.3.4"), address("255.255.0.0"), "thunderbolt", 0, false};
  // Two hosts each with Docker's bridge: its subnet joins nothing; the link-local bridge is
  // on one side only.
  const auto shared = probe::sharedWith("studio", {wifi0, docker0}, "mbp-1", {wifi1, docker1, bridge1});
  EXPECT_FALSE(shared.sameHostAsServer);
  ASSERT_EQ(shared.subnets.size(), 1u);
  EXPECT_EQ(shared.subnets[0].subnet, "192.168.1.0/24");
  EXPECT_EQ(shared.subnets[0].workerAddress, "192.168.1.11");
  EXPECT_EQ(shared.subnets[0].kind, "wifi");
  // Rank 0's own host.
  EXPECT_TRUE(probe::sharedWith("studio", {wifi0, docker0}, "studio", {wifi0, docker0}).sameHostAsServer);
}

TEST(Network, TheFastestSubnetIsTheOneWhoseSlowestWorkerIsFastest) {
  using probe::SharedSubnet;
  probe::WorkerNetwork one{1, "mbp-1", false,
                           {SharedSubnet{"192.168.1.0/24", "wifi", 0, "192.168.1.10", "192.168.1.11", 30e6},
                            SharedSubnet{"10.0.1.0/24", "thunderbolt", 0, "10.0.1.1", "10.0.1.2", 900e6}}};
  probe::WorkerNetwork two{2, "mbp-2", false,
                           {SharedSubnet{"192.168.1.0/24", "wifi", 0, "192.168.1.10", "192.168.1.12", 25e6},
                            SharedSubnet{"10.0.1.0/24", "thunderbolt", 0, "10.0.1.1", "10.0.1.3", 700e6}}};
  probe::WorkerNetwork local{3, "studio", true, {SharedSubnet{"192.168.1.0/24", "wifi", 0, "192.168.1.10", "192.168.1.10", 0}}};
  const auto best = probe::fastestCommonSubnet({one, two, local});
  EXPECT_EQ(best.subnet, "10.0.1.0/24");
  EXPECT_EQ(best.bytesPerSecond, 700e6);
  EXPECT_EQ(probe::addressesOn({one, two, local}, "10.0.1.0/24"),
            (std::vector<std::string>{"10.0.1.1", "10.0.1.2", "10.0.1.3"}));
  // A subnet one worker lacks is no choice for the job.
  two.subnets.pop_back();
  EXPECT_EQ(probe::fastestCommonSubnet({one, two}).subnet, "192.168.1.0/24");
  EXPECT_EQ(probe::fastestCommonSubnet({local}).subnet, "");
}

}  // namespace
}  // namespace pstrain
