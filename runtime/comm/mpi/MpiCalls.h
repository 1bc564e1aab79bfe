#pragma once
// What the files of runtime/comm/mpi/ share, private to the folder: an MPI return code as a
// CommError, counts in MPI's ints and the chunks that keep them there.
#include <fmt/format.h>
#include <mpi.h>

#include <climits>
#include <cstddef>
#include <string>

#include "runtime/Errors.h"

namespace pstrain::comm::mpi {

inline void check(int rc, const std::string& what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw CommError(fmt::format("{} failed: {}", what, std::string(text, length)));
}

inline int intCount(std::size_t count, const std::string& what) {
  if (count > static_cast<std::size_t>(INT_MAX)) {
    throw CommError(fmt::format("{}: {} elements is more than one MPI message can carry", what, count));
  }
  return static_cast<int>(count);
}

// MPI counts are ints: move large buffers in chunks of at most 1 GiB.
constexpr std::size_t kMaxChunk = std::size_t(1) << 30;
// A blocking reduction moves in chunks of 64 MiB, one after the other: Open MPI's reduce
// (libnbc) holds a temporary as large as the reduction on the root and on every rank with
// children in its tree. In whole-gradient chunks that was one more copy of the model on
// rank 0 (162 M parameters, AdamW and --clip-grad-norm: 5 copies instead of 4; 105 M: 2186
// MiB of peak RSS, 1847 in 64 MiB chunks, the weights bit-identical).
constexpr std::size_t kReduceChunk = std::size_t(1) << 26;

}  // namespace pstrain::comm::mpi
