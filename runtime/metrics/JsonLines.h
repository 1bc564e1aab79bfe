#pragma once
// Appends one JSON object per line to a file, flushed after every line so a crash loses
// at most the line being written.
#include <cstdio>
#include <string>

#include "runtime/metrics/Json.h"

namespace pstrain::metrics {

class JsonLines {
 public:
  explicit JsonLines(const std::string& path);  // throws pstrain::Error if not writable
  ~JsonLines();
  JsonLines(const JsonLines&) = delete;
  JsonLines& operator=(const JsonLines&) = delete;

  void write(const JsonObject& object);

 private:
  std::string path_;
  std::FILE* file_;
};

}  // namespace pstrain::metrics
