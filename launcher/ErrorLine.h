#pragma once
#include <unistd.h>

#include <string>

#include "runtime/Text.h"

namespace pstrain::launcher {

// What every line of this process starts with: "" unless pstrain's ranks set it
// (LinePrefix.h: "[RANK@HOST] ").
inline std::string& linePrefix() {
  static std::string prefix;
  return prefix;
}

// Writes linePrefix(), `line` and a newline to stderr in one write(2): a process that
// MPI_Abort on another rank kills a moment later still leaves a whole line, never a
// fragment (stderr is unbuffered, so `std::cerr << a << b` is several writes). Control
// bytes but its line breaks are written as \xNN (printable): an error may quote a file's
// or another program's text, which must not drive the terminal.
inline void printErrorLine(const std::string& line) {
  std::string text = linePrefix();
  std::size_t start = 0;
  for (std::size_t end; (end = line.find('\n', start)) != std::string::npos; start = end + 1) {
    text += printable(line.substr(start, end - start)) + "\n";
  }
  text += printable(line.substr(start)) + "\n";
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(STDERR_FILENO, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace pstrain::launcher
