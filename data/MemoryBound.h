#pragma once
// Before a reader allocates what a file's header promises: the split must fit this host's
// memory, shared by its ranks (each holds its own copy). A garbled or crafted header that
// promises more is a DataError before any allocation, however well its data compresses.
#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "runtime/Errors.h"
#include "runtime/Portable.h"

namespace pstrain::data {

// Throws DataError naming `path` and `what` when `bytesPerRank` times the ranks on this
// host exceeds its physical memory (not checked where the memory is unknown).
inline void requireMemoryFor(double bytesPerRank, const std::string& path, const std::string& what) {
  const std::uint64_t memory = portable::physicalMemoryBytes();
  const int ranks = portable::ranksOnThisHost();
  if (memory == 0 || bytesPerRank * ranks <= static_cast<double>(memory)) return;
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  throw DataError(fmt::format("{}: {} needs {:.2f} GiB of memory in each of this host's {} rank(s), {:.2f} GiB in all, "
                              "but the host has {:.2f} GiB; use fewer ranks per host, or a smaller or token file "
                              "(--block-size, read window by window)", path, what, bytesPerRank / kGiB, ranks,
                              bytesPerRank * ranks / kGiB, static_cast<double>(memory) / kGiB));
}

}  // namespace pstrain::data
