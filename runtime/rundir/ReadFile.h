#pragma once
// Reading a whole input file once, by one descriptor: what is checked is then what is used
// (a file renamed into the path between two opens is never read). Torch-free.
#include <functional>
#include <string>

namespace pstrain::rundir {

// Calls the caller's error with what is wrong; must throw.
using ReadFail = std::function<void(const std::string& what)>;

// The whole of the regular file `path`, at most the size it had when opened. Opened without
// blocking, so that a FIFO or a device in a file's place is refused, never waited on.
// `fail` gets "cannot open (...)", "not a regular file" or "cannot read (...)".
std::string readRegularFile(const std::string& path, const ReadFail& fail);

// The regular file `path` opened for reading (O_CLOEXEC), checked on that descriptor: a
// FIFO, a device or a directory is refused through `fail`, without blocking. The caller
// closes the descriptor.
int openRegularFile(const std::string& path, const ReadFail& fail);

}  // namespace pstrain::rundir
