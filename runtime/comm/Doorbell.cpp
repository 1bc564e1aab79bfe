#include "runtime/comm/Doorbell.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "runtime/net/Interfaces.h"
#include "runtime/net/Socket.h"

namespace pstrain::comm {
namespace {

// An interface address that the doorbell listens on, with its network's mask.
struct Listening {
  in_addr address{}, netmask{};
};

// The IPv4 addresses of the interfaces that are up and that `interfaces` selects.
std::vector<Listening> selectAddresses(const Doorbell::Interfaces& interfaces) {
  const auto include = net::splitList(interfaces.include), exclude = net::splitList(interfaces.exclude);
  std::vector<Listening> external, loopback;
  for (const net::Interface& i : net::localInterfaces()) {
    // As Open MPI's TCP transport: an include list makes the exclude list moot.
    if (!include.empty() && !net::matches(include, i.name, i.address)) continue;
    if (include.empty() && net::matches(exclude, i.name, i.address)) continue;
    (i.loopback && include.empty() ? loopback : external).push_back(Listening{i.address, i.netmask});
  }
  // A peer on another host cannot reach this loopback; one on this host reaches the
  // external addresses as well.
  return external.empty() ? loopback : external;
}

// A non-blocking UDP socket bound to `address`:`port` (0: an ephemeral port), or -1.
// select() needs the descriptor below FD_SETSIZE.
int bindSocket(in_addr address, int& port) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return -1;
  sockaddr_in bound = net::socketAddress(address, port);
  socklen_t length = sizeof bound;
  // Non-blocking: a ring never waits for buffer space, and sleep() drains without blocking.
  if (fd >= FD_SETSIZE || !net::setNonBlocking(fd) ||
      ::bind(fd, reinterpret_cast<sockaddr*>(&bound), sizeof bound) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
    ::close(fd);
    return -1;
  }
  port = ntohs(bound.sin_port);
  return fd;
}

std::uint64_t rotl(std::uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

using net::getBigEndian;
using net::putBigEndian;

}  // namespace

std::uint64_t Doorbell::sipHash24(const Key& key, const unsigned char* bytes, std::size_t size) {
  std::uint64_t v0 = 0x736f6d6570736575ull ^ key.k0, v1 = 0x646f72616e646f6dull ^ key.k1;
  std::uint64_t v2 = 0x6c7967656e657261ull ^ key.k0, v3 = 0x7465646279746573ull ^ key.k1;
  auto round = [&] {
    v0 += v1, v1 = rotl(v1, 13), v1 ^= v0, v0 = rotl(v0, 32);
    v2 += v3, v3 = rotl(v3, 16), v3 ^= v2;
    v0 += v3, v3 = rotl(v3, 21), v3 ^= v0;
    v2 += v1, v1 = rotl(v1, 17), v1 ^= v2, v2 = rotl(v2, 32);
  };
  auto word = [](const unsigned char* p, std::size_t n) {  // little-endian, n <= 8 bytes
    std::uint64_t w = 0;
    for (std::size_t i = 0; i < n; ++i) w |= std::uint64_t(p[i]) << (8 * i);
    return w;
  };
  std::size_t at = 0;
  for (; at + 8 <= size; at += 8) {
    const std::uint64_t m = word(bytes + at, 8);
    v3 ^= m, round(), round(), v0 ^= m;
  }
  const std::uint64_t last = word(bytes + at, size - at) | std::uint64_t(size & 0xff) << 56;
  v3 ^= last, round(), round(), v0 ^= last;
  v2 ^= 0xff;
  round(), round(), round(), round();
  return v0 ^ v1 ^ v2 ^ v3;
}

Doorbell::Doorbell(const Interfaces& interfaces, bool enabled, bool oneHost) {
  if (!enabled) return;
  std::vector<Listening> addresses;
  if (oneHost) {
    Listening loopback;
    loopback.address.s_addr = htonl(INADDR_LOOPBACK);
    loopback.netmask.s_addr = htonl(0xff000000u);
    addresses.push_back(loopback);
  } else {
    addresses = selectAddresses(interfaces);
  }
  // Every socket on the port of the first: an address advertises one port. An address
  // whose socket cannot have it is left out (peers do not ring it).
  for (const Listening& l : addresses) {
    const int fd = bindSocket(l.address, port_);
    if (fd >= 0) sockets_.push_back({fd, l.address, l.netmask});
  }
}

Doorbell::~Doorbell() {
  for (const Socket& s : sockets_) ::close(s.fd);
}

std::string Doorbell::address() const {
  if (sockets_.empty()) return "";
  std::string out = std::to_string(port_);
  for (const Socket& s : sockets_) {
    char text[INET_ADDRSTRLEN];
    if (::inet_ntop(AF_INET, &s.address, text, sizeof text)) out += std::string(" ") + text;
  }
  return out;
}

void Doorbell::connect(const std::vector<std::string>& addresses, int self, const Key& key) {
  peers_.assign(addresses.size(), {});
  self_ = static_cast<std::uint32_t>(self);
  key_ = key;
  lastCounter_.assign(addresses.size(), 0);
  const bool selfAmong = self >= 0 && static_cast<std::size_t>(self) < addresses.size();
  unheard_ = addresses.size() - (selfAmong ? 1 : 0);
  for (std::size_t rank = 0; rank < addresses.size(); ++rank) {
    std::istringstream in(addresses[rank]);
    int port = 0;
    if (!(in >> port) || port <= 0 || port > 65535) continue;
    for (std::string text; in >> text;) {
      in_addr address{};
      if (::inet_pton(AF_INET, text.c_str(), &address) == 1) peers_[rank].push_back(net::socketAddress(address, port));
    }
  }
}

namespace {

// What a ring's MAC covers: the ringer, the rank rung and the counter.
std::uint64_t ringMac(const Doorbell::Key& key, std::uint32_t rank, std::uint32_t to, std::uint64_t counter) {
  unsigned char covered[16];
  putBigEndian(rank, 4, covered);
  putBigEndian(to, 4, covered + 4);
  putBigEndian(counter, 8, covered + 8);
  return Doorbell::sipHash24(key, covered, sizeof covered);
}

}  // namespace

void Doorbell::encodeRing(const Key& key, const Ring& ring, std::uint32_t to, unsigned char out[kRingBytes]) {
  putBigEndian(ring.rank, 4, out);
  putBigEndian(ring.counter, 8, out + 4);
  putBigEndian(ringMac(key, ring.rank, to, ring.counter), 8, out + 12);
}

int Doorbell::treeParent(int rank, int root, int ranks) {
  const int relative = (rank - root + ranks) % ranks;
  return relative == 0 ? -1 : ((relative & (relative - 1)) + root) % ranks;
}

std::optional<Doorbell::Ring> Doorbell::parseRing(const void* bytes, std::size_t size, const Key& key,
                                                  std::size_t ranks, std::uint32_t to) {
  if (size != kRingBytes) return std::nullopt;
  const auto* p = static_cast<const unsigned char*>(bytes);
  Ring ring{static_cast<std::uint32_t>(getBigEndian(p, 4)), getBigEndian(p + 4, 8)};
  if (getBigEndian(p + 12, 8) != ringMac(key, ring.rank, to, ring.counter)) return std::nullopt;
  if (ring.rank >= ranks) return std::nullopt;
  return ring;
}

const Doorbell::Socket& Doorbell::socketFor(const sockaddr_in& to) const {
  for (const Socket& s : sockets_) {
    if ((to.sin_addr.s_addr & s.netmask.s_addr) == (s.address.s_addr & s.netmask.s_addr)) return s;
  }
  return sockets_.front();  // routed: any socket's datagrams reach it
}

void Doorbell::ring(int rank) {
  if (sockets_.empty() || rank < 0 || static_cast<std::size_t>(rank) >= peers_.size()) return;
  unsigned char datagram[kRingBytes];
  encodeRing(key_, {self_, ++counter_}, static_cast<std::uint32_t>(rank), datagram);
  for (const sockaddr_in& to : peers_[rank]) {
    // Best effort by contract: a failed or dropped datagram only costs the peer its pause.
    (void)::sendto(socketFor(to).fd, datagram, sizeof datagram, 0, reinterpret_cast<const sockaddr*>(&to), sizeof to);
  }
}

bool Doorbell::sleep(std::chrono::microseconds pause) {
  const auto until = std::chrono::steady_clock::now() + pause;
  if (sockets_.empty()) {
    std::this_thread::sleep_until(until);
    return false;
  }
  fd_set readable;
  FD_ZERO(&readable);
  int highest = -1;
  for (const Socket& s : sockets_) {
    FD_SET(s.fd, &readable);
    highest = std::max(highest, s.fd);
  }
  timeval timeout{static_cast<decltype(timeout.tv_sec)>(pause.count() / 1000000),
                  static_cast<decltype(timeout.tv_usec)>(pause.count() % 1000000)};
  if (::select(highest + 1, &readable, nullptr, nullptr, &timeout) <= 0) return false;
  // Drain the rings waiting, at most kMaxDrain datagrams in all, noting whose they are: a
  // ring counts when its MAC is the job's and its counter newer than its ringer's last;
  // anything else is a stray (the buffer is larger than a ring so that a longer datagram
  // shows).
  unsigned char datagram[2 * kRingBytes];
  bool rung = false;
  int read = 0;
  for (const Socket& s : sockets_) {
    if (!FD_ISSET(s.fd, &readable)) continue;
    for (ssize_t got = 0; read < kMaxDrain && (got = ::recv(s.fd, datagram, sizeof datagram, 0)) >= 0; ++read) {
      const auto ring = parseRing(datagram, static_cast<std::size_t>(got), key_, lastCounter_.size(), self_);
      if (!ring || ring->counter <= lastCounter_[ring->rank]) continue;
      if (lastCounter_[ring->rank] == 0 && ring->rank != self_) --unheard_;  // its first ring
      lastCounter_[ring->rank] = ring->counter;
      rung = true;
    }
  }
  // Strays alone: sleep out the pause without listening (a flood must not spin this rank).
  if (!rung) std::this_thread::sleep_until(until);
  return rung;
}

}  // namespace pstrain::comm
