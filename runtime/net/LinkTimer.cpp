#include "runtime/net/LinkTimer.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <random>
#include <vector>

#include "runtime/Portable.h"
#include "runtime/metrics/Clock.h"
#include "runtime/net/Socket.h"

namespace pstrain::net {
namespace {

using metrics::Clock;

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

// Reads from the non-blocking `fd` into `out` until `size` bytes are in, the peer closes,
// or `deadline`; returns the bytes read.
std::size_t readUpTo(int fd, unsigned char* out, std::size_t size, Clock::time_point deadline) {
  std::size_t got = 0;
  while (got < size && waitFor(fd, POLLIN, deadline)) {
    const ssize_t n = ::recv(fd, out + got, size - got, 0);
    if (n > 0) got += static_cast<std::size_t>(n);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
  }
  return got;
}

// Counts what the sender on `peer` sends until it half-closes or `deadline`, then answers
// with the count (8 bytes, big-endian).
std::uint64_t countAndAnswer(int peer, Clock::time_point deadline) {
  std::vector<char> buffer(1 << 20);
  std::uint64_t received = 0;
  while (waitFor(peer, POLLIN, deadline)) {
    const ssize_t n = ::recv(peer, buffer.data(), buffer.size(), 0);
    if (n > 0) received += static_cast<std::uint64_t>(n);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
  }
  unsigned char answer[8];
  putBigEndian(received, 8, answer);
  if (waitFor(peer, POLLOUT, Clock::now() + std::chrono::seconds(1))) {
    ::send(peer, answer, sizeof answer, portable::sendFlagsWithoutSigpipe(peer));
  }
  return received;
}

}  // namespace

LinkToken randomLinkToken() {
  std::random_device entropy;  // the kernel's random source
  LinkToken token;
  for (auto& byte : token) byte = static_cast<unsigned char>(entropy());
  return token;
}

LinkListener::LinkListener(in_addr address) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd_ < 0) return;
  sockaddr_in bound = socketAddress(address, 0);
  socklen_t length = sizeof bound;
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&bound), sizeof bound) != 0 || ::listen(fd_, 4) != 0 ||
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&bound), &length) != 0 || !setNonBlocking(fd_)) {
    ::close(fd_);
    fd_ = -1;
    return;
  }
  port_ = ntohs(bound.sin_port);
}

LinkListener::~LinkListener() {
  if (fd_ >= 0) ::close(fd_);
}

std::size_t LinkListener::receiveOne(const LinkToken& token, std::chrono::milliseconds timeout) {
  if (fd_ < 0) return 0;
  const auto deadline = Clock::now() + timeout;
  while (waitFor(fd_, POLLIN, deadline)) {
    const int peer = ::accept(fd_, nullptr, nullptr);
    if (peer < 0) continue;
    setNonBlocking(peer);
    LinkToken said{};
    // A connection that does not start with the token within a second is not the sender's.
    const bool sender = readUpTo(peer, said.data(), said.size(), std::min(deadline, Clock::now() + std::chrono::seconds(1))) ==
                            said.size() && said == token;
    const std::uint64_t received = sender ? countAndAnswer(peer, deadline) : 0;
    ::close(peer);
    if (sender) return static_cast<std::size_t>(received);
  }
  return 0;
}

double timeSend(in_addr from, in_addr to, int port, const LinkToken& token, std::size_t bytes,
                std::chrono::milliseconds timeout) {
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
    // Sends `size` bytes of `data`, as many as go before the deadline; how many went. A
    // receiver that closes (it took this connection for another's) is EPIPE, not SIGPIPE.
    const int flags = portable::sendFlagsWithoutSigpipe(fd);
    auto sendUpTo = [&](const void* data, std::size_t size) {
      std::size_t sent = 0;
      while (sent < size && waitFor(fd, POLLOUT, deadline)) {
        const ssize_t n = ::send(fd, static_cast<const char*>(data) + sent, size - sent, flags);
        if (n > 0) sent += static_cast<std::size_t>(n);
        if (n < 0 && errno != EAGAIN && errno != EINTR) break;
      }
      return sent;
    };
    if (sendUpTo(token.data(), token.size()) == token.size()) {
      const std::vector<char> chunk(1 << 20, 'p');
      for (std::size_t sent = 0; sent < bytes;) {
        const std::size_t part = std::min(chunk.size(), bytes - sent), went = sendUpTo(chunk.data(), part);
        sent += went;
        if (went < part) break;  // the deadline, or the path broke
      }
    }
    ::shutdown(fd, SHUT_WR);
    unsigned char answer[8];
    if (readUpTo(fd, answer, sizeof answer, deadline + std::chrono::seconds(1)) == sizeof answer) {
      rate = static_cast<double>(getBigEndian(answer, 8)) / std::max(metrics::secondsSince(start), 1e-6);
    }
  }
  ::close(fd);
  return rate;
}

}  // namespace pstrain::net
