#include "runtime/zip/ArchiveCheck.h"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>

#include "runtime/Text.h"

namespace pstrain::zip {
namespace {

// The archive's records by their lower-case names: where their data are, and whether they
// are stored (else deflated: their bytes as they are in the file).
struct Record {
  Span data;
  bool stored = true;
};
using Records = std::map<std::string, Record>;

}  // namespace

ArchiveContents checkArchive(std::uint64_t size, const ReadAt& read, ArchiveKind kind, const Fail& fail) {
  const bool modelFile = kind == ArchiveKind::ModelFile;
  ArchiveContents contents;
  Records records;
  std::uint64_t inflated = 0;
  for (const Entry& entry : readDirectory(size, read, fail)) {
    // miniz (libtorch's reader) extracts nothing of a directory, nor of a record of no
    // compressed bytes, and leaves the memory it allocated for its declared size as it was:
    // the loader would read whatever that memory held, not what the checks read.
    if (entry.directory) fail(fmt::format("record {} is marked a directory", entry.name));
    // libtorch looks records up by C string: a name with a NUL byte would be another
    // record's to it (the check would size one storage, the loader read another).
    if (entry.name.find('\0') != std::string::npos) fail(fmt::format("record {} has a NUL byte in its name", printable(entry.name)));
    if (entry.compressedSize == 0 && entry.size != 0) {
      fail(fmt::format("record {} declares {} bytes but holds none", entry.name, entry.size));
    }
    const bool stored = entry.method == 0 && entry.compressedSize == entry.size;
    if (!stored && !(modelFile && entry.method == 8)) fail(fmt::format("record {} is compressed", entry.name));
    if (!stored && (entry.size > kMaxInflated || (inflated += entry.size) > kMaxInflatedTotal)) {
      fail(fmt::format("record {} inflates to {} bytes (at most {} a record, {} in all)", entry.name, entry.size,
                       kMaxInflated, kMaxInflatedTotal));
    }
    const std::uint64_t data = dataOffset(entry, size, read, fail);
    // libtorch finds a record by name case-insensitively (miniz's default): two names that
    // differ only in case are two records it cannot tell apart.
    const Record record{{data, data + (stored ? entry.size : entry.compressedSize)}, stored};
    if (!records.emplace(lowerCase(entry.name), record).second) {
      fail(fmt::format("two records named {} (letter case aside)", entry.name));
    }
    if (stored) contents.stored.emplace(lowerCase(entry.name), record.data);
    const std::uint64_t facts[2] = {entry.size, entry.crc};
    contents.directoryCrc = crc32Of(crc32Of(contents.directoryCrc, entry.name.data(), entry.name.size()), facts, sizeof facts);
    if (records.size() == 1) {  // libtorch reads every record from the first one's folder
      const std::size_t slash = entry.name.find('/');
      if (slash == std::string::npos) fail(fmt::format("record {} is not in a folder", entry.name));
      contents.root = entry.name.substr(0, slash);
    }
  }
  const std::string root = lowerCase(contents.root) + "/";
  const std::vector<std::string> pickles = modelFile ? std::vector<std::string>{"data", "constants"}
                                                     : std::vector<std::string>{"data"};
  for (const std::string& name : pickles) {
    const auto pickle = records.find(root + name + ".pkl");
    if (pickle == records.end()) {
      if (name == "data") fail("no data.pkl record");
      continue;
    }
    if (!pickle->second.stored) fail(fmt::format("{}.pkl is compressed", name));
    // Each storage's record holds exactly its elements (libtorch sizes the storage by what
    // the pickle says, whatever the record holds).
    const StorageCheck storage = [&](const std::string& key, const ElementType& type, std::uint64_t elements) {
      const auto record = records.find(root + name + "/" + lowerCase(key));
      const auto bad = [&](const std::string& what) { fail(fmt::format("{}.pkl: storage '{}' {}", name, printable(key), what)); };
      if (record == records.end()) bad("has no record");
      if (!record->second.stored) bad("is compressed");
      const std::uint64_t bytes = record->second.data.end - record->second.data.begin;
      if (elements > bytes / type.bytes || elements * type.bytes != bytes) {
        bad(fmt::format("declares {} elements of {} bytes, but its record holds {} bytes", elements, type.bytes, bytes));
      }
      if (name == "data") contents.storages.insert(record->first);
    };
    const Span at = pickle->second.data;
    if (at.end - at.begin > kMaxPickleBytes) {
      fail(fmt::format("{}.pkl is {} bytes, more than the {} of any file pstrain reads", name, at.end - at.begin,
                       kMaxPickleBytes));
    }
    std::string& bytes = contents.pickleBytes[name];
    bytes.resize(static_cast<std::size_t>(at.end - at.begin));
    read(at.begin, bytes.data(), bytes.size());
    contents.pickles.emplace(name, readPickle(bytes, modelFile ? PickleRules::ModelFile : PickleRules::Weights,
                                              storage, [&](const std::string& what) { fail(fmt::format("{}.pkl: {}", name, what)); }));
  }
  return contents;
}

}  // namespace pstrain::zip

namespace pstrain::zip {

ArchiveContents checkArchive(std::string_view bytes, ArchiveKind kind, const Fail& fail) {
  return checkArchive(bytes.size(), [&](std::uint64_t at, void* out, std::size_t n) {
    if (at > bytes.size() || n > bytes.size() - at) fail("a record outside the file");
    if (n > 0) std::memcpy(out, bytes.data() + at, n);
  }, kind, fail);
}

std::string_view recordOf(std::string_view bytes, const Span& data) {
  return bytes.substr(static_cast<std::size_t>(data.begin), static_cast<std::size_t>(data.end - data.begin));
}

}  // namespace pstrain::zip
