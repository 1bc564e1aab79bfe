#include "launcher/LinePrefix.h"

#include "launcher/ErrorLine.h"

#include <unistd.h>

#include <iostream>
#include <streambuf>

namespace pstrain::launcher {
namespace {

// Collects a line and writes prefix + line at its newline; text without one yet goes out
// when the stream is flushed (nothing is lost at exit).
class PrefixedLines : public std::streambuf {
 public:
  PrefixedLines(int fd, std::string prefix) : fd_(fd), prefix_(std::move(prefix)) {}

 protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    line_ += traits_type::to_char_type(c);
    if (c == '\n') writeLine();
    return c;
  }
  std::streamsize xsputn(const char* text, std::streamsize n) override {
    for (std::streamsize i = 0; i < n; ++i) overflow(traits_type::to_int_type(text[i]));
    return n;
  }
  int sync() override {
    if (!line_.empty()) writeLine();
    return 0;
  }

 private:
  void writeLine() {
    const std::string text = prefix_ + line_;
    line_.clear();
    for (std::size_t done = 0; done < text.size();) {
      const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
      if (n <= 0) return;
      done += static_cast<std::size_t>(n);
    }
  }

  int fd_;
  std::string prefix_;
  std::string line_;
};

}  // namespace

void prefixLines(int rank, const std::string& host) {
  linePrefix() = "[" + std::to_string(rank) + "@" + host + "] ";
  std::cout.flush();
  std::cerr.flush();
  // Lines, not every insertion: with unitbuf (cerr's default) each << would be flushed and
  // so written as a line of its own.
  std::cerr.unsetf(std::ios_base::unitbuf);
  // Never deleted: the streams are flushed during exit, after static objects are gone.
  std::cout.rdbuf(new PrefixedLines(STDOUT_FILENO, linePrefix()));
  std::cerr.rdbuf(new PrefixedLines(STDERR_FILENO, linePrefix()));
}

}  // namespace pstrain::launcher
