#pragma once
// The rate of one network path, timed with a TCP transfer of pstrain's own, bounded in bytes
// and time: the probe's measure of each subnet two hosts share, whatever interfaces MPI
// uses. The receiver listens on one address; the sender connects from its own address on
// the same subnet (so the path is that subnet's), sends the transfer's token, then the
// bytes, half-closes, and the receiver answers with the count it read. The token (random,
// one per job, handed out over MPI) is what makes a connection the sender's: the receiver
// closes any that does not start with it and waits on for the next, so a local process
// that connects first can neither stand in for the sender nor spoil its measure. Torch-free.
#include <netinet/in.h>

#include <array>
#include <chrono>
#include <cstddef>

namespace pstrain::net {

using LinkToken = std::array<unsigned char, 16>;
// A random token (the kernel's random source).
LinkToken randomLinkToken();

class LinkListener {
 public:
  // A TCP socket listening on `address`, on an ephemeral port; port() is 0 when it could
  // not be made.
  explicit LinkListener(in_addr address);
  ~LinkListener();
  LinkListener(const LinkListener&) = delete;
  LinkListener& operator=(const LinkListener&) = delete;

  int port() const { return port_; }
  // Accepts the sender that starts with `token` and reads what it sends until it
  // half-closes or `timeout` passes (from the call), then answers with the byte count.
  // Returns that count (0: no such sender came).
  std::size_t receiveOne(const LinkToken& token, std::chrono::milliseconds timeout);

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Connects from `from` to `to`:`port`, sends `token` and up to `bytes` (stopping at
// `timeout`), and returns the bytes the receiver read per second, from the connection's
// start to its answer; 0 when the path does not connect or answer within `timeout` (plus a
// second).
double timeSend(in_addr from, in_addr to, int port, const LinkToken& token, std::size_t bytes,
                std::chrono::milliseconds timeout);

}  // namespace pstrain::net
