#include "runtime/comm/Doorbell.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

namespace pstrain::comm {
namespace {

std::vector<std::string> splitList(const std::string& list) {
  std::vector<std::string> items;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

// Whether interface `name` with address `address` (network order) is one of `items`: names
// or CIDRs ("192.168.1.0/24").
bool matches(const std::vector<std::string>& items, const std::string& name, in_addr address) {
  for (const auto& item : items) {
    const auto slash = item.find('/');
    if (slash == std::string::npos) {
      if (item == name) return true;
      continue;
    }
    in_addr network{};
    const int bits = std::atoi(item.c_str() + slash + 1);
    if (::inet_pton(AF_INET, item.substr(0, slash).c_str(), &network) != 1 || bits < 0 || bits > 32) continue;
    const std::uint32_t mask = bits == 0 ? 0 : htonl(~std::uint32_t(0) << (32 - bits));
    if ((address.s_addr & mask) == (network.s_addr & mask)) return true;
  }
  return false;
}

// The IPv4 addresses of the interfaces that are up and that `interfaces` selects.
std::vector<std::string> selectAddresses(const Doorbell::Interfaces& interfaces) {
  const auto include = splitList(interfaces.include), exclude = splitList(interfaces.exclude);
  std::vector<std::string> external, loopback;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return {};
  for (const ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    const in_addr address = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr;
    if (!include.empty() && !matches(include, i->ifa_name, address)) continue;
    if (matches(exclude, i->ifa_name, address)) continue;
    char text[INET_ADDRSTRLEN];
    if (!::inet_ntop(AF_INET, &address, text, sizeof text)) continue;
    ((i->ifa_flags & IFF_LOOPBACK) && include.empty() ? loopback : external).emplace_back(text);
  }
  ::freeifaddrs(list);
  // A peer on another host cannot reach this loopback; one on this host reaches the
  // external addresses as well.
  return external.empty() ? loopback : external;
}

}  // namespace

Doorbell::Doorbell(const Interfaces& interfaces, bool enabled) {
  if (!enabled) return;
  addresses_ = selectAddresses(interfaces);
  if (addresses_.empty()) return;
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return;
  sockaddr_in bound{};
  bound.sin_family = AF_INET;
  bound.sin_addr.s_addr = htonl(INADDR_ANY);
  // One address: listen there only. Several: every interface (a socket binds one address);
  // datagrams arriving elsewhere are no rings without the token anyway.
  if (addresses_.size() == 1) ::inet_pton(AF_INET, addresses_[0].c_str(), &bound.sin_addr);
  bound.sin_port = 0;
  socklen_t length = sizeof bound;
  // Non-blocking: a ring never waits for buffer space, and sleep() drains without blocking.
  // select() needs the descriptor below FD_SETSIZE.
  if (fd >= FD_SETSIZE || ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK) != 0 ||
      ::bind(fd, reinterpret_cast<sockaddr*>(&bound), sizeof bound) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
    ::close(fd);
    return;
  }
  socket_ = fd;
  port_ = ntohs(bound.sin_port);
}

Doorbell::~Doorbell() {
  if (socket_ >= 0) ::close(socket_);
}

std::string Doorbell::address() const {
  if (socket_ < 0) return "";
  std::string out = std::to_string(port_);
  for (const auto& a : addresses_) out += " " + a;
  return out;
}

void Doorbell::connect(const std::vector<std::string>& addresses, int self, std::uint64_t token) {
  peers_.assign(addresses.size(), {});
  self_ = static_cast<std::uint32_t>(self);
  token_ = token;
  heard_.assign(addresses.size(), false);
  if (self >= 0 && static_cast<std::size_t>(self) < heard_.size()) heard_[self] = true;
  unheard_ = static_cast<std::size_t>(std::count(heard_.begin(), heard_.end(), false));
  for (std::size_t rank = 0; rank < addresses.size(); ++rank) {
    std::istringstream in(addresses[rank]);
    int port = 0;
    if (!(in >> port) || port <= 0 || port > 65535) continue;
    for (std::string text; in >> text;) {
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_port = htons(static_cast<std::uint16_t>(port));
      if (::inet_pton(AF_INET, text.c_str(), &to.sin_addr) == 1) peers_[rank].push_back(to);
    }
  }
}

void Doorbell::encodeRing(std::uint64_t token, std::uint32_t rank, unsigned char out[kRingBytes]) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(token >> (56 - 8 * i));
  for (int i = 0; i < 4; ++i) out[8 + i] = static_cast<unsigned char>(rank >> (24 - 8 * i));
}

int Doorbell::treeParent(int rank, int root, int ranks) {
  const int relative = (rank - root + ranks) % ranks;
  return relative == 0 ? -1 : ((relative & (relative - 1)) + root) % ranks;
}

std::optional<std::uint32_t> Doorbell::parseRing(const void* bytes, std::size_t size, std::uint64_t token,
                                                  std::size_t ranks) {
  if (size != kRingBytes) return std::nullopt;
  const auto* p = static_cast<const unsigned char*>(bytes);
  std::uint64_t theirs = 0;
  std::uint32_t rank = 0;
  for (int i = 0; i < 8; ++i) theirs = theirs << 8 | p[i];
  for (int i = 8; i < 12; ++i) rank = rank << 8 | p[i];
  if (theirs != token || rank >= ranks) return std::nullopt;
  return rank;
}

void Doorbell::ring(int rank) {
  if (socket_ < 0 || rank < 0 || static_cast<std::size_t>(rank) >= peers_.size()) return;
  unsigned char datagram[kRingBytes];
  encodeRing(token_, self_, datagram);
  for (const sockaddr_in& to : peers_[rank]) {
    // Best effort by contract: a failed or dropped datagram only costs the peer its pause.
    (void)::sendto(socket_, datagram, sizeof datagram, 0, reinterpret_cast<const sockaddr*>(&to), sizeof to);
  }
}

bool Doorbell::sleep(std::chrono::microseconds pause) {
  const auto until = std::chrono::steady_clock::now() + pause;
  if (socket_ < 0) {
    std::this_thread::sleep_until(until);
    return false;
  }
  fd_set readable;
  FD_ZERO(&readable);
  FD_SET(socket_, &readable);
  timeval timeout{static_cast<decltype(timeout.tv_sec)>(pause.count() / 1000000),
                  static_cast<decltype(timeout.tv_usec)>(pause.count() % 1000000)};
  if (::select(socket_ + 1, &readable, nullptr, nullptr, &timeout) <= 0) return false;
  // Drain the rings waiting, at most kMaxDrain datagrams, noting whose they are; anything
  // else is a stray (the buffer is larger than a ring so that a longer datagram shows).
  unsigned char datagram[2 * kRingBytes];
  bool rung = false;
  ssize_t got = 0;
  for (int read = 0; read < kMaxDrain && (got = ::recv(socket_, datagram, sizeof datagram, 0)) >= 0; ++read) {
    const auto rank = parseRing(datagram, static_cast<std::size_t>(got), token_, heard_.size());
    if (!rank) continue;
    rung = true;
    if (!heard_[*rank]) {
      heard_[*rank] = true;
      --unheard_;
    }
  }
  // Strays alone: sleep out the pause without listening (a flood must not spin this rank).
  if (!rung) std::this_thread::sleep_until(until);
  return rung;
}

}  // namespace pstrain::comm
