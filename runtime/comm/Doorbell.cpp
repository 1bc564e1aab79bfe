#include "runtime/comm/Doorbell.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <thread>

namespace pstrain::comm {

Doorbell::Doorbell() {
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return;
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  any.sin_port = 0;
  socklen_t length = sizeof any;
  // Non-blocking: a ring never waits for buffer space, and sleep() drains without blocking.
  // select() needs the descriptor below FD_SETSIZE.
  if (fd >= FD_SETSIZE || ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK) != 0 ||
      ::bind(fd, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&any), &length) != 0) {
    ::close(fd);
    return;
  }
  socket_ = fd;
  port_ = ntohs(any.sin_port);
}

Doorbell::~Doorbell() {
  if (socket_ >= 0) ::close(socket_);
}

std::string Doorbell::address() const {
  if (socket_ < 0) return "";
  std::vector<std::string> external, loopback;
  ifaddrs* interfaces = nullptr;
  if (::getifaddrs(&interfaces) == 0) {
    for (const ifaddrs* i = interfaces; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
      char text[INET_ADDRSTRLEN];
      if (!::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text)) {
        continue;
      }
      ((i->ifa_flags & IFF_LOOPBACK) ? loopback : external).emplace_back(text);
    }
    ::freeifaddrs(interfaces);
  }
  // A peer on another host cannot reach this loopback; one on this host reaches the
  // external addresses as well.
  const auto& reachable = external.empty() ? loopback : external;
  std::string out = std::to_string(port_);
  for (const auto& a : reachable) out += " " + a;
  return out;
}

void Doorbell::connect(const std::vector<std::string>& addresses, int self) {
  peers_.assign(addresses.size(), {});
  self_ = static_cast<std::uint32_t>(self);
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

void Doorbell::ring(int rank) {
  if (socket_ < 0 || rank < 0 || static_cast<std::size_t>(rank) >= peers_.size()) return;
  const std::uint32_t from = htonl(self_);
  for (const sockaddr_in& to : peers_[rank]) {
    // Best effort by contract: a failed or dropped datagram only costs the peer its pause.
    (void)::sendto(socket_, &from, sizeof from, 0, reinterpret_cast<const sockaddr*>(&to), sizeof to);
  }
}

bool Doorbell::sleep(std::chrono::microseconds pause) {
  if (socket_ < 0) {
    std::this_thread::sleep_for(pause);
    return false;
  }
  fd_set readable;
  FD_ZERO(&readable);
  FD_SET(socket_, &readable);
  timeval timeout{static_cast<decltype(timeout.tv_sec)>(pause.count() / 1000000),
                  static_cast<decltype(timeout.tv_usec)>(pause.count() % 1000000)};
  if (::select(socket_ + 1, &readable, nullptr, nullptr, &timeout) <= 0) return false;
  // Drain every ring waiting, noting whose it is (anything else is a stray: dropped; the
  // buffer is larger than a ring so that a longer datagram shows as one).
  unsigned char datagram[2 * sizeof(std::uint32_t)];
  for (ssize_t got; (got = ::recv(socket_, datagram, sizeof datagram, 0)) >= 0;) {
    std::uint32_t from = 0;
    if (got != sizeof from) continue;
    std::memcpy(&from, datagram, sizeof from);
    const std::uint32_t rank = ntohl(from);
    if (rank < heard_.size() && !heard_[rank]) {
      heard_[rank] = true;
      --unheard_;
    }
  }
  return true;
}

}  // namespace pstrain::comm
