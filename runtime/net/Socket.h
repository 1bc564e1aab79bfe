#pragma once
// What every socket of pstrain's own sets up alike (the doorbell's UDP, the probe's timed
// TCP transfers): the IPv4 address of a port, non-blocking mode, and the big-endian
// integers of their wire formats. Torch-free.
#include <fcntl.h>
#include <netinet/in.h>

#include <cstdint>

namespace pstrain::net {

inline sockaddr_in socketAddress(in_addr address, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr = address;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  return a;
}

// Whether `fd` is now non-blocking.
inline bool setNonBlocking(int fd) { return ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK) == 0; }

inline void putBigEndian(std::uint64_t value, int bytes, unsigned char* out) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(value >> (8 * (bytes - 1 - i)));
}

inline std::uint64_t getBigEndian(const unsigned char* in, int bytes) {
  std::uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value = value << 8 | in[i];
  return value;
}

}  // namespace pstrain::net
