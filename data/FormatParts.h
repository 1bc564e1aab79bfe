#pragma once
// What the format readers (*Format.cpp, one per row of Formats.h) share, private to data/:
// where a source's files are, and each reader's row, which Formats.cpp lists.
#include <filesystem>
#include <string>
#include <vector>

#include "data/Formats.h"

namespace pstrain::data {

// A built-in dataset's folder (--data-dir, else its own in dataRoot()), or the folder the
// user named.
std::string folderOf(const DataSource& source);
// What a file-backed format reads: every regular file under its folder, sorted (the folder
// itself when it is missing, so that ranks still compare something).
std::vector<std::string> filesUnder(const DataSource& source);
// A format of one file: the file the source names.
std::vector<std::string> theFileItself(const DataSource& source);
// Whether `path` exists (false on any error).
bool isThere(const std::filesystem::path& path);

// The rows, one per reader file.
extern const FormatRow kIdxFormat, kCifarFormat, kNpzFormat, kTokenFormat, kSyntheticFormat;

}  // namespace pstrain::data
