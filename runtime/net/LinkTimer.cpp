#include "runtime/net/LinkTimer.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/metrics/Clock.h"

namespace pstrain::net {
namespace {

using metrics::Clock;

void setNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Waits until `fd` is ready for `events` or `deadline` passes; false on the deadline.
bool waitFor(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

sockaddr_in socketAddress(in_addr address, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr = address;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  return a;
}

}  // namespace

LinkListener::LinkListener(in_addr address) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd_ < 0) return;
  sockaddr_in bound = socketAddress(address, 0);
  socklen_t length = sizeof bound;
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&bound), sizeof bound) != 0 || ::listen(fd_, 4) != 0 ||
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
    ::close(fd_);
    fd_ = -1;
    return;
  }
  setNonBlocking(fd_);
  port_ = ntohs(bound.sin_port);
}

LinkListener::~LinkListener() {
  if (fd_ >= 0) ::close(fd_);
}

std::size_t LinkListener::receiveOne(std::chrono::milliseconds timeout) {
  if (fd_ < 0) return 0;
  const auto deadline = Clock::now() + timeout;
  if (!waitFor(fd_, POLLIN, deadline)) return 0;
  const int peer = ::accept(fd_, nullptr, nullptr);
  if (peer < 0) return 0;
  setNonBlocking(peer);
  std::vector<char> buffer(1 << 20);
  std::uint64_t received = 0;
  while (waitFor(peer, POLLIN, deadline)) {
    const ssize_t n = ::recv(peer, buffer.data(), buffer.size(), 0);
    if (n > 0) received += static_cast<std::uint64_t>(n);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
  }
  unsigned char answer[8];
  for (int i = 0; i < 8; ++i) answer[i] = static_cast<unsigned char>(received >> (56 - 8 * i));
  if (waitFor(peer, POLLOUT, Clock::now() + std::chrono::seconds(1))) ::send(peer, answer, sizeof answer, 0);
  ::close(peer);
  return static_cast<std::size_t>(received);
}

double timeSend(in_addr from, in_addr to, int port, std::size_t bytes, std::chrono::milliseconds timeout) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  double rate = 0;
  sockaddr_in source = socketAddress(from, 0), target = socketAddress(to, port);
  setNonBlocking(fd);
  int error = 0;
  socklen_t length = sizeof error;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&source), sizeof source) == 0 &&
      (::connect(fd, reinterpret_cast<sockaddr*>(&target), sizeof target) == 0 || errno == EINPROGRESS) &&
      waitFor(fd, POLLOUT, deadline) && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0) {
    const std::vector<char> chunk(1 << 20, 'p');
    for (std::size_t sent = 0; sent < bytes && waitFor(fd, POLLOUT, deadline);) {
      const ssize_t n = ::send(fd, chunk.data(), std::min(chunk.size(), bytes - sent), 0);
      if (n > 0) sent += static_cast<std::size_t>(n);
      if (n < 0 && errno != EAGAIN && errno != EINTR) break;
    }
    ::shutdown(fd, SHUT_WR);
    unsigned char answer[8];
    std::size_t got = 0;
    while (got < sizeof answer && waitFor(fd, POLLIN, deadline + std::chrono::seconds(1))) {
      const ssize_t n = ::recv(fd, answer + got, sizeof answer - got, 0);
      if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR))) break;
      if (n > 0) got += static_cast<std::size_t>(n);
    }
    if (got == sizeof answer) {
      std::uint64_t received = 0;
      for (unsigned char b : answer) received = received << 8 | b;
      rate = static_cast<double>(received) / std::max(metrics::secondsSince(start), 1e-6);
    }
  }
  ::close(fd);
  return rate;
}

}  // namespace pstrain::net
