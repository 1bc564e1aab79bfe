#pragma once
// The rate of one network path, timed with a TCP transfer of pstrain's own, bounded in bytes
// and time: the probe's measure of each subnet two hosts share, whatever interfaces MPI
// uses. The receiver listens on one address; the sender connects from its own address on
// the same subnet (so the path is that subnet's), sends, half-closes, and the receiver
// answers with the count it read. Torch-free.
#include <netinet/in.h>

#include <chrono>
#include <cstddef>

namespace pstrain::net {

class LinkListener {
 public:
  // A TCP socket listening on `address`, on an ephemeral port; port() is 0 when it could
  // not be made.
  explicit LinkListener(in_addr address);
  ~LinkListener();
  LinkListener(const LinkListener&) = delete;
  LinkListener& operator=(const LinkListener&) = delete;

  int port() const { return port_; }
  // Accepts one sender and reads what it sends until it half-closes or `timeout` passes
  // (from the call), then answers with the byte count. Returns that count (0: nobody came).
  std::size_t receiveOne(std::chrono::milliseconds timeout);

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Connects from `from` to `to`:`port`, sends up to `bytes` (stopping at `timeout`), and
// returns the bytes the receiver read per second, from the connection's start to its
// answer; 0 when the path does not connect or answer within `timeout` (plus a second).
double timeSend(in_addr from, in_addr to, int port, std::size_t bytes, std::chrono::milliseconds timeout);

}  // namespace pstrain::net
