#include "data/Formats.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "data/FormatParts.h"
#include "runtime/Errors.h"

namespace pstrain::data {

namespace fs = std::filesystem;

std::string folderOf(const DataSource& source) {
  const DatasetInfo* named = namedDataset(source.name);
  if (!named) return source.name;
  return source.dir.empty() ? named->defaultDir : source.dir;
}

std::vector<std::string> filesUnder(const DataSource& source) {
  const std::string where = folderOf(source);
  std::vector<std::string> files;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(where, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_regular_file(ec)) files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  return files.empty() ? std::vector<std::string>{where} : files;
}

std::vector<std::string> theFileItself(const DataSource& source) { return {source.name}; }

bool isThere(const fs::path& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

// In the order paths are tried.
const std::vector<FormatRow>& formats() {
  static const std::vector<FormatRow> table = {kIdxFormat, kCifarFormat, kNpzFormat, kTokenFormat, kSyntheticFormat};
  return table;
}

const FormatRow& formatOf(const std::string& name) {
  const DatasetInfo* named = namedDataset(name);
  for (const FormatRow& row : formats()) {
    if (named ? named->format == row.name : row.recognises && row.recognises(name)) return row;
  }
  if (named) throw InternalError(fmt::format("dataset '{}' names format '{}', which has no row", name, named->format));
  std::string names, paths;
  for (const DatasetInfo& info : datasetList()) names += (names.empty() ? "" : ", ") + info.name;
  for (const FormatRow& row : formats()) {
    if (row.recognises) paths += fmt::format("\n  {}", row.reads);
  }
  std::error_code ec;
  const std::string what = fs::is_directory(name, ec) ? fmt::format("{}: a folder that holds no format's files", name)
                           : fs::exists(name, ec)     ? fmt::format("{}: a file that no format reads", name)
                                                      : fmt::format("unknown dataset '{}'", name);
  throw ConfigError(fmt::format("{}: give a built-in name ({}; --list-datasets) or the path of{}", what, names, paths));
}

}  // namespace pstrain::data
