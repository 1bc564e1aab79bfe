#pragma once
// Appends one JSON object per line to a file (a RecordFile: each line whole or not at all,
// a crash loses at most the line being written).
#include <string>

#include "runtime/metrics/Json.h"
#include "runtime/metrics/RecordFile.h"

namespace pstrain::metrics {

class JsonLines {
 public:
  explicit JsonLines(const std::string& path) : file_(path) {}  // throws pstrain::Error if not writable

  // Throws pstrain::Error when the line could not be written (the file is as before).
  void write(const JsonObject& object) { file_.append(object.str() + "\n"); }

 private:
  RecordFile file_;
};

}  // namespace pstrain::metrics
