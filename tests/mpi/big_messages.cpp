// Run under `mpirun -np 2`: point-to-point messages past MPI's int count (2^31 - 1 bytes),
// which the backup and async modes send for a model over 2 GiB. Rank 1 sends 2^31 + 4099
// bytes to rank 0, which takes it from any source (as the async server does) into room for
// more; rank 0 sends it back to rank 1, which names its source. Every byte must arrive, and
// a message larger than the receiver's room must be refused with a CommError, the message
// taken off the queue. Each rank holds one 2 GiB buffer. Exit 0 on success.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "runtime/Errors.h"
#include "runtime/comm/mpi/MpiComm.h"

using namespace pstrain;

namespace {

constexpr std::size_t kBytes = (std::size_t(1) << 31) + 4099;

// Byte i of the pattern: differs across every 4 KiB and across the chunks of a ByteSpan.
std::uint8_t patternAt(std::size_t i) { return static_cast<std::uint8_t>((i * 2654435761u) >> 13 ^ (i >> 30)); }

bool holdsPattern(const std::vector<std::uint8_t>& buffer, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes; ++i) {
    if (buffer[i] != patternAt(i)) {
      std::fprintf(stderr, "byte %zu is %u, not %u\n", i, buffer[i], patternAt(i));
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  comm::mpi::MpiSession mpi(&argc, &argv);
  comm::mpi::MpiComm comm;
  comm.connect(true);
  if (comm.size() != 2) {
    std::cerr << "big_messages: run it with mpirun -np 2\n";
    return 2;
  }
  int failed = 0;
  auto expect = [&](bool ok, const std::string& what) {
    std::printf("rank %d: %s  %s\n", comm.rank(), what.c_str(), ok ? "ok" : "FAILED");
    failed += !ok;
  };
  try {
    std::vector<std::uint8_t> buffer(kBytes + 64);
    if (comm.rank() == 1) {
      for (std::size_t i = 0; i < kBytes; ++i) buffer[i] = patternAt(i);
      comm.send(buffer.data(), kBytes, 0, "the big message");
      std::memset(buffer.data(), 0, buffer.size());
      const auto got = comm.receive(buffer.data(), buffer.size(), 0, "the big message back");
      expect(got.source == 0 && got.bytes == kBytes && holdsPattern(buffer, kBytes),
             std::to_string(got.bytes) + " bytes back from rank 0, every one as sent");
      comm.send(buffer.data(), kBytes, 0, "too big");
    } else {
      const auto got = comm.receive(buffer.data(), buffer.size(), comm::Communicator::kAnySource, "the big message");
      expect(got.source == 1 && got.bytes == kBytes && holdsPattern(buffer, kBytes),
             std::to_string(got.bytes) + " bytes from any source (rank 1), every one as sent");
      comm.send(buffer.data(), kBytes, 1, "the big message back");
      std::string error;
      try {
        comm.receive(buffer.data(), kBytes - 1, 1, "too big");
      } catch (const CommError& e) {
        error = e.what();
      }
      expect(error.find("a message of 2147487747 bytes from rank 1, expected at most 2147487746") != std::string::npos,
             "a message past the room is refused: " + error);
    }
    comm.barrier("the end");
  } catch (const std::exception& e) {
    std::cerr << "rank " << comm.rank() << ": " << e.what() << std::endl;
    comm::mpi::MpiSession::abortJob(1);
  }
  return failed == 0 ? 0 : 1;
}
