#pragma once
// The dataset formats, one row each: a format's name, what it reads (said when a path is none
// of them), how it recognises a path, what it yields, and its reader. A built-in dataset
// (Dataset.h's datasetList) names its row. A new format is its parser (a torch-free file of
// its own, fuzzed: Idx.h, Cifar.h, Npz.h, TokenFile.h), its reader with its row (a file
// NAMEFormat.cpp, as IdxFormat.cpp), and one entry in Formats.cpp's table.
#include <string>
#include <vector>

#include "data/Dataset.h"

namespace pstrain::data {

enum class Yields {
  Labelled,     // samples (images, values or token ids), each with its label(s) or target
  TokenStream,  // windows of a stream of ids, each window's targets the next ids (--block-size)
};

struct FormatRow {
  const char* name;
  const char* reads;  // what a path of it is, for the refusal of one that no row reads
  Yields yields;
  // Whether the path is of this format: its extension, its first bytes or a folder's
  // contents. Null: only built-in names are (the synthetic datasets).
  bool (*recognises)(const std::string& path);
  DatasetInfo (*info)(const DataSource& source);  // the sample shape and classes
  Dataset (*load)(const DataSource& source, Split split);
  std::vector<std::string> (*files)(const DataSource& source);  // every file it reads, both splits
};

// Every format, in the order paths are tried.
const std::vector<FormatRow>& formats();
// The row of a built-in dataset's name, or the first that recognises the path; throws
// ConfigError naming the built-in datasets and what each format reads otherwise.
const FormatRow& formatOf(const std::string& name);

}  // namespace pstrain::data
