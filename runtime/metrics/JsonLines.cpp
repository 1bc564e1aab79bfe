#include "runtime/metrics/JsonLines.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#include "runtime/Errors.h"

namespace pstrain::metrics {

JsonLines::JsonLines(const std::string& path) : path_(path), file_(std::fopen(path.c_str(), "a")) {
  if (!file_) throw Error(fmt::format("{}: cannot open for writing ({})", path, std::strerror(errno)));
}

JsonLines::~JsonLines() { std::fclose(file_); }

void JsonLines::write(const JsonObject& object) {
  std::string line = object.str() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    throw Error(fmt::format("{}: write failed ({})", path_, std::strerror(errno)));
  }
}

}  // namespace pstrain::metrics
