#include "runtime/checkpoint/WeightsFile.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>
#include <variant>

#include "runtime/Errors.h"
#include "runtime/FileLimits.h"
#include "runtime/Text.h"
#include "runtime/checkpoint/Safetensors.h"
#include "runtime/rundir/AtomicFile.h"
#include "runtime/rundir/ReadFile.h"
#include "runtime/zip/ArchiveCheck.h"
#include "runtime/zip/Json.h"

namespace pstrain::checkpoint {

// c10::ScalarType's values, as zip/ElementTypes.h gives them without torch.
static_assert(static_cast<int>(at::kByte) == 0 && static_cast<int>(at::kChar) == 1 && static_cast<int>(at::kShort) == 2 &&
              static_cast<int>(at::kInt) == 3 && static_cast<int>(at::kLong) == 4 && static_cast<int>(at::kHalf) == 5 &&
              static_cast<int>(at::kFloat) == 6 && static_cast<int>(at::kDouble) == 7 &&
              static_cast<int>(at::kComplexHalf) == 8 && static_cast<int>(at::kComplexFloat) == 9 &&
              static_cast<int>(at::kComplexDouble) == 10 && static_cast<int>(at::kBool) == 11 &&
              static_cast<int>(at::kQInt8) == 12 && static_cast<int>(at::kQUInt8) == 13 &&
              static_cast<int>(at::kQInt32) == 14 && static_cast<int>(at::kBFloat16) == 15 &&
              static_cast<int>(at::kQUInt4x2) == 16 && static_cast<int>(at::kQUInt2x4) == 17,
              "zip/ElementTypes.h's scalarType values are libtorch's");

at::ScalarType scalarTypeOf(const zip::ElementType& type) {
  if (type.scalarType < 0) throw InternalError(fmt::format("{}: no libtorch type", type.code));
  return static_cast<at::ScalarType>(type.scalarType);
}

const zip::ElementType* elementTypeOf(at::ScalarType type) {
  const zip::ElementType* row = zip::elementTypeOfScalar(static_cast<int>(type));
  return row && row->weights ? row : nullptr;
}

std::int64_t StoredTensor::numel() const { return static_cast<std::int64_t>(elementCount(sizes).value_or(0)); }

bool StoredTensor::contiguous() const {
  std::int64_t expected = 1;
  for (std::size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] != 1 && strides[d] != expected) return numel() == 0;
    expected *= sizes[d];
  }
  return true;
}

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kIndexName = "model.safetensors.index.json";

[[noreturn]] void refuse(const std::string& path, const std::string& what) {
  throw ConfigError(fmt::format("{}: {}", path, what));
}

std::string readableTypes() {
  std::string names;
  for (const zip::ElementType& t : zip::kElementTypes) {
    if (t.weights) names += (names.empty() ? "" : ", ") + std::string(t.code);
  }
  return names;
}

// One file's bytes: an open file (read as asked), or bytes in memory.
class Source {
 public:
  explicit Source(const std::string& path)
      : path_(path), file_(rundir::InputFile(path, [&](const std::string& what) { refuse(path, what); })) {}
  Source(std::string_view bytes, std::string path) : path_(std::move(path)), file_(bytes) {}

  const std::string& path() const { return path_; }
  std::uint64_t size() const {
    return std::holds_alternative<rundir::InputFile>(file_) ? std::get<rundir::InputFile>(file_).size()
                                                            : std::get<std::string_view>(file_).size();
  }
  void read(std::uint64_t at, void* out, std::size_t n) const {
    if (const auto* file = std::get_if<rundir::InputFile>(&file_)) {
      return file->read(at, out, n, [&](const std::string& what) { refuse(path_, what); });
    }
    const std::string_view bytes = std::get<std::string_view>(file_);
    if (at > bytes.size() || n > bytes.size() - at) refuse(path_, "a read past its end");
    std::memcpy(out, bytes.data() + at, n);
  }
  std::string read(std::uint64_t at, std::size_t n) const {
    std::string out(n, '\0');
    read(at, out.data(), n);
    return out;
  }

 private:
  std::string path_;
  std::variant<rundir::InputFile, std::string_view> file_;
};

std::vector<std::int64_t> contiguousStrides(const std::vector<std::int64_t>& sizes) {
  std::vector<std::int64_t> strides(sizes.size());
  std::int64_t stride = 1;
  for (std::size_t d = sizes.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= std::max<std::int64_t>(sizes[d], 1);
  }
  return strides;
}

// The weights element type `type`, or a refusal naming the tensor.
const zip::ElementType& weightsType(const zip::ElementType* type, const std::string& path, const std::string& name,
                                    const std::string& stored) {
  if (!type || !type->weights) {
    refuse(path, fmt::format("'{}' is a tensor of {}; pstrain reads {} tensors", printable(name), printable(stored),
                             readableTypes()));
  }
  return *type;
}

}  // namespace

struct WeightsReader::Impl {
  std::string path;
  std::vector<Source> files;
  std::vector<StoredTensor> tensors;
  std::uint32_t crc = 0;  // of the structure
  std::uint64_t bytes = 0;
  // torch.save's archive (one file): what its check found.
  std::optional<zip::ArchiveContents> archive;
  mutable std::uint64_t made = 0;  // bytes of tensors read whole (read(t))
  // The tensors read whole, by where they are: names of one view of one storage (a tie, as
  // torch.save writes it) are one tensor, as torch.load makes them.
  using Place = std::tuple<std::size_t, std::uint64_t, std::int64_t, std::vector<std::int64_t>, std::vector<std::int64_t>,
                           const zip::ElementType*>;
  mutable std::map<Place, at::Tensor> madeAt;

  void addCrc(std::string_view text) { crc = zip::crc32Of(crc, text.data(), text.size()); }

  // A safetensors file, its header checked; its tensors added.
  void openSafetensors(std::size_t file) {
    const Source& source = files[file];
    const auto fail = [&](const std::string& what) {
      refuse(source.path(), fmt::format("neither torch.save's archive (a zip) nor a safetensors file pstrain reads ({})",
                                        what));
    };
    const std::string first = source.read(0, static_cast<std::size_t>(std::min<std::uint64_t>(8, source.size())));
    const std::uint64_t n = safetensorsHeaderLength(first, source.size(), fail);
    const std::string text = source.read(8, static_cast<std::size_t>(n));
    const SafetensorsHeader header = readSafetensorsHeader(text, source.size(), fail);
    addCrc(first);
    addCrc(text);
    for (const SafetensorsEntry& e : header.tensors) {
      StoredTensor t;
      t.name = e.name;
      t.type = &weightsType(zip::elementTypeOfCode(e.dtype), source.path(), e.name, e.dtype);
      t.sizes = e.shape;
      t.strides = contiguousStrides(e.shape);
      t.file = file;
      t.storage = header.dataStart + e.begin;
      t.storageElements = (e.end - e.begin) / t.type->bytes;
      tensors.push_back(std::move(t));
    }
  }

  // torch.save's archive (the only file), checked; the tensors of its state dict added.
  void openArchive() {
    const Source& source = files[0];
    const zip::Fail fail = [&](const std::string& what) {
      refuse(source.path(), fmt::format("not a sound torch.save archive ({})", what));
    };
    archive = zip::checkArchive(
        source.size(), [&](std::uint64_t at, void* out, std::size_t n) { source.read(at, out, n); },
        zip::ArchiveKind::Checkpoint, fail);
    const std::string root = lowerCase(archive->root) + "/";
    if (const auto order = archive->stored.find(root + "byteorder"); order != archive->stored.end()) {
      const zip::Span span = order->second;
      if (span.end - span.begin > 16 || source.read(span.begin, static_cast<std::size_t>(span.end - span.begin)) != "little") {
        refuse(source.path(), "its tensors are big-endian (its byteorder record); save it again on a little-endian machine");
      }
    }
    addCrc(archive->pickleBytes.at("data"));
    crc = zip::crc32Of(crc, &archive->directoryCrc, sizeof archive->directoryCrc);
  }

  const zip::Pickled& pickled() const { return archive->pickles.at("data"); }

  StoredTensor storedOf(zip::Pickled::Id value, const std::string& name) const {
    const zip::PickledTensor& p = pickled().tensor(value);
    StoredTensor t;
    t.name = name;
    t.type = &weightsType(p.type, files[0].path(), name, p.type->storage);
    t.sizes = p.sizes;
    t.strides = p.strides;
    t.offset = p.offset;
    t.storageElements = p.storageElements;
    t.file = 0;
    if (t.numel() > 0) {
      const auto record = archive->stored.find(lowerCase(archive->root) + "/data/" + lowerCase(p.key));
      if (record == archive->stored.end()) throw InternalError("a checked archive's storage has no record");
      t.storage = record->second.begin;
    }
    return t;
  }

  std::vector<StoredTensor> tensorsOf(zip::Pickled::Id dict, const std::string& what) const {
    const zip::Pickled& p = pickled();
    if (p.kind(dict) != zip::Pickled::Kind::Dict) refuse(files[0].path(), fmt::format("{} is not a dict", what));
    std::vector<StoredTensor> out;
    std::set<std::string_view> names;
    const std::vector<zip::Pickled::Id>& items = p.items(dict);
    for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
      if (p.kind(items[i]) != zip::Pickled::Kind::Text || p.kind(items[i + 1]) != zip::Pickled::Kind::Tensor) {
        refuse(files[0].path(), fmt::format("{} holds an entry that is not a name and a tensor", what));
      }
      const std::string_view name = p.text(items[i]);
      if (!names.insert(name).second) {
        refuse(files[0].path(), fmt::format("{} names '{}' twice (torch.load would keep the last of them, pstrain "
                                            "neither: which is meant?)", what, printable(std::string(name))));
      }
      out.push_back(storedOf(items[i + 1], std::string(name)));
    }
    return out;
  }

  // The state dict of the archive's pickle: its top dict, or the one under "model" or
  // "state_dict".
  void takeStateDict() {
    const zip::Pickled& p = pickled();
    using Kind = zip::Pickled::Kind;
    const auto allTensors = [&](zip::Pickled::Id dict) {
      if (p.kind(dict) != Kind::Dict || p.items(dict).empty()) return false;
      const auto& items = p.items(dict);
      for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
        if (p.kind(items[i]) != Kind::Text || p.kind(items[i + 1]) != Kind::Tensor) return false;
      }
      return true;
    };
    const zip::Pickled::Id top = p.top();
    if (allTensors(top)) {
      tensors = tensorsOf(top, "its state dict");
      return;
    }
    if (p.kind(top) != Kind::Dict) {
      refuse(path, "not a dict of tensors; save it with torch.save(model.state_dict(), FILE)");
    }
    const zip::Fail twice = [&](const std::string& what) { refuse(path, what); };
    for (const char* key : {"model", "state_dict"}) {
      if (const auto found = p.find(top, key, twice); found && allTensors(*found)) {
        tensors = tensorsOf(*found, fmt::format("its state dict (\"{}\")", key));
        return;
      }
    }
    std::string keys;
    const auto& items = p.items(top);
    for (std::size_t i = 0; i + 1 < items.size() && keys.size() < 200; i += 2) {
      if (p.kind(items[i]) == Kind::Text) keys += (keys.empty() ? "" : ", ") + printable(std::string(p.text(items[i])));
    }
    refuse(path, fmt::format("a dict of {} that holds no state dict (a dict of names to tensors, or one under \"model\" "
                             "or \"state_dict\"); save it with torch.save(model.state_dict(), FILE)",
                             keys.empty() ? "nothing" : keys));
  }

  // One file (files[0]) by its first bytes: torch.save's archive, the legacy format (refused),
  // else safetensors.
  void openFile() {
    const Source& source = files[0];
    const std::string first = source.read(0, static_cast<std::size_t>(std::min<std::uint64_t>(12, source.size())));
    const auto startsWith = [&](std::string_view prefix) { return std::string_view(first).substr(0, prefix.size()) == prefix; };
    if (startsWith("PK\x03\x04")) {
      openArchive();
      takeStateDict();
    } else if (startsWith("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8")) {
      // torch.save's format before PyTorch 1.6 (and with _use_new_zipfile_serialization=False):
      // a pickle (protocol 2) of its magic number, then the data's.
      refuse(source.path(), "torch.save's legacy format (before PyTorch 1.6, or _use_new_zipfile_serialization=False), "
                            "which pstrain does not read: save it again with torch.save(torch.load(FILE), FILE)");
    } else {
      openSafetensors(0);
    }
  }

  // The hub's shards: the index (model.safetensors.index.json) at `index`, each shard it
  // names opened, every tensor in the shard the index says, each once.
  void openShards(const std::string& index) {
    files.emplace_back(index);
    const Source& source = files[0];
    if (source.size() > kMaxSafetensorsHeader) refuse(index, "larger than any index of shards");
    const std::string text = source.read(0, static_cast<std::size_t>(source.size()));
    addCrc(text);
    const zip::JsonValue top = zip::parseJson(text, [&](const std::string& what) { refuse(index, what); });
    const zip::JsonValue* map = top.member("weight_map");
    if (top.kind != zip::JsonValue::Kind::Object || !map || map->kind != zip::JsonValue::Kind::Object) {
      refuse(index, "not an index of shards (a JSON object with a \"weight_map\" object)");
    }
    std::map<std::string, std::size_t> shardOf;  // by file name: its place in `files`
    std::map<std::string, std::string> wanted;   // tensor -> its shard's file name
    for (const auto& [name, file] : map->members) {
      if (file.kind != zip::JsonValue::Kind::String) refuse(index, fmt::format("'{}' maps to no file name", printable(name)));
      const std::string& shard = file.text;
      if (shard.empty() || shard.find('/') != std::string::npos || shard.find('\\') != std::string::npos ||
          shard == "." || shard == "..") {
        refuse(index, fmt::format("names the shard '{}', which is not a file beside it", printable(shard)));
      }
      wanted.emplace(name, shard);
      if (shardOf.count(shard)) continue;
      const std::string shardPath = (fs::path(index).parent_path() / shard).string();
      std::error_code error;
      if (!fs::exists(shardPath, error)) refuse(index, fmt::format("names the shard {}, which is missing", printable(shardPath)));
      shardOf.emplace(shard, files.size());
      files.emplace_back(shardPath);
      openSafetensors(files.size() - 1);
    }
    for (const StoredTensor& t : tensors) {
      const auto it = wanted.find(t.name);
      const std::string& shard = fs::path(files[t.file].path()).filename().string();
      if (it == wanted.end() || it->second != shard) {
        refuse(files[t.file].path(), fmt::format("holds '{}', which the index {} places {}", printable(t.name), index,
                                                 it == wanted.end() ? std::string("nowhere")
                                                                    : "in " + printable(it->second)));
      }
      wanted.erase(it);
    }
    if (!wanted.empty()) {
      refuse(index, fmt::format("places '{}' in {}, which does not hold it", printable(wanted.begin()->first),
                                printable(wanted.begin()->second)));
    }
  }
};

namespace {

// What `path` names: the index of shards, or one file (a folder: what the hub puts in it).
std::string fileOf(const std::string& path, bool& index) {
  std::error_code error;
  index = endsWith(path, ".index.json");
  if (!fs::is_directory(path, error)) return path;
  for (const char* name : {"model.safetensors.index.json", "model.safetensors", "pytorch_model.bin"}) {
    const fs::path candidate = fs::path(path) / name;
    if (fs::exists(candidate, error)) {
      index = candidate.filename() == kIndexName;
      return candidate.string();
    }
  }
  refuse(path, "a folder without model.safetensors.index.json, model.safetensors or pytorch_model.bin");
}

}  // namespace

WeightsReader::WeightsReader(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  bool index = false;
  const std::string file = fileOf(path, index);
  if (index) {
    impl_->openShards(file);
  } else {
    impl_->files.emplace_back(file);
    impl_->openFile();
  }
  for (const Source& s : impl_->files) impl_->bytes += s.size();
}

WeightsReader::WeightsReader(std::string_view bytes, const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  impl_->files.emplace_back(bytes, path);
  impl_->bytes = bytes.size();
  impl_->openFile();
}

WeightsReader::WeightsReader(WeightsReader&&) noexcept = default;
WeightsReader& WeightsReader::operator=(WeightsReader&&) noexcept = default;
WeightsReader::~WeightsReader() = default;

const std::string& WeightsReader::path() const { return impl_->path; }
const std::vector<StoredTensor>& WeightsReader::tensors() const { return impl_->tensors; }
std::uint32_t WeightsReader::structureCrc() const { return impl_->crc; }
std::uint64_t WeightsReader::bytes() const { return impl_->bytes; }

const zip::Pickled* WeightsReader::pickled() const { return impl_->archive ? &impl_->pickled() : nullptr; }

StoredTensor WeightsReader::stored(zip::Pickled::Id tensor, const std::string& name) const {
  if (!impl_->archive) throw InternalError("a safetensors file has no pickle");
  if (impl_->pickled().kind(tensor) != zip::Pickled::Kind::Tensor) refuse(impl_->path, fmt::format("'{}' is not a tensor", name));
  return impl_->storedOf(tensor, name);
}

std::vector<StoredTensor> WeightsReader::tensorsOf(zip::Pickled::Id dict, const std::string& what) const {
  if (!impl_->archive) throw InternalError("a safetensors file has no pickle");
  return impl_->tensorsOf(dict, what);
}

void WeightsReader::read(const StoredTensor& t, at::Tensor& into, std::uint32_t* crc) const {
  if (into.sizes() != at::IntArrayRef(t.sizes) || !into.device().is_cpu()) {
    throw InternalError(fmt::format("{}: '{}' read into a tensor of another shape or place", impl_->path, t.name));
  }
  if (!into.is_contiguous()) {  // (a module's transposed parameter, say)
    into.copy_(read(t));
    return;
  }
  const std::int64_t numel = t.numel();
  if (numel == 0) return;
  const Source& source = impl_->files[t.file];
  const at::ScalarType type = scalarTypeOf(*t.type);
  const std::uint64_t element = t.type->bytes;
  const auto options = at::TensorOptions().dtype(type);
  if (!t.contiguous()) {  // the span of its storage it covers, then the view of it
    std::int64_t last = 0;
    for (std::size_t d = 0; d < t.sizes.size(); ++d) last += (t.sizes[d] - 1) * t.strides[d];
    at::Tensor span = at::empty({last + 1}, options);
    source.read(t.storage + static_cast<std::uint64_t>(t.offset) * element, span.data_ptr(), span.nbytes());
    if (crc) *crc = zip::crc32Of(*crc, span.data_ptr(), span.nbytes());
    into.copy_(span.as_strided(t.sizes, t.strides));
    return;
  }
  const std::uint64_t begin = t.storage + static_cast<std::uint64_t>(t.offset) * element;
  const std::uint64_t total = static_cast<std::uint64_t>(numel) * element;
  if (into.scalar_type() == type) {  // straight into its memory
    source.read(begin, into.data_ptr(), static_cast<std::size_t>(total));
    if (crc) *crc = zip::crc32Of(*crc, into.data_ptr(), static_cast<std::size_t>(total));
    return;
  }
  // Converted a piece at a time: no copy of the whole tensor in the file's type.
  constexpr std::uint64_t kPiece = std::uint64_t(16) << 20;
  const std::int64_t perPiece = static_cast<std::int64_t>(std::max<std::uint64_t>(kPiece / element, 1));
  at::Tensor flat = into.view({-1});
  at::Tensor piece = at::empty({std::min<std::int64_t>(perPiece, numel)}, options);
  for (std::int64_t at = 0; at < numel; at += perPiece) {
    const std::int64_t n = std::min<std::int64_t>(perPiece, numel - at);
    at::Tensor part = piece.narrow(0, 0, n);
    source.read(begin + static_cast<std::uint64_t>(at) * element, part.data_ptr(), part.nbytes());
    if (crc) *crc = zip::crc32Of(*crc, part.data_ptr(), part.nbytes());
    flat.narrow(0, at, n).copy_(part);
  }
}

at::Tensor WeightsReader::read(const StoredTensor& t) const {
  const Impl::Place place{t.file, t.storage, t.offset, t.sizes, t.strides, t.type};
  if (const auto it = impl_->madeAt.find(place); it != impl_->madeAt.end()) return it->second;
  const std::uint64_t limit = 4 * impl_->bytes + (1 << 20);
  impl_->made += static_cast<std::uint64_t>(t.numel()) * t.type->bytes;
  if (impl_->made > limit) {
    refuse(impl_->path, fmt::format("its tensors view its storages more than 4 times over (at '{}')", printable(t.name)));
  }
  at::Tensor out = at::empty(t.sizes, at::TensorOptions().dtype(scalarTypeOf(*t.type)));
  read(t, out);
  impl_->madeAt.emplace(place, out);
  return out;
}

TensorList WeightsReader::readAll() const {
  TensorList out;
  for (const StoredTensor& t : impl_->tensors) out.emplace_back(t.name, read(t));
  return out;
}

TensorList readWeights(std::string_view bytes, const std::string& path) { return WeightsReader(bytes, path).readAll(); }

namespace {

// A tensor's identity as a tie shares it: the same elements of the same storage.
using TensorKey = std::tuple<const void*, std::vector<std::int64_t>, std::vector<std::int64_t>, at::ScalarType>;
TensorKey keyOf(const at::Tensor& t) {
  return {t.numel() > 0 ? t.data_ptr() : nullptr, t.sizes().vec(), t.strides().vec(), t.scalar_type()};
}

void writeSafetensors(const std::string& path, const TensorList& tensors, const Ties& given) {
  std::vector<SafetensorsEntry> entries;
  std::vector<at::Tensor> data;
  Ties ties;
  std::map<TensorKey, std::string> written;
  const std::map<std::string, std::string> aliases(given.begin(), given.end());
  for (const auto& [name, tensor] : tensors) {
    if (const auto alias = aliases.find(name); alias != aliases.end()) {
      ties.emplace_back(name, alias->second);
      continue;
    }
    const at::Tensor t = tensor.to(torch::kCPU);
    const auto [first, fresh] = written.emplace(keyOf(t), name);
    if (given.empty() && !fresh && t.numel() > 0) {  // no ties recorded: a tensor met again is one
      ties.emplace_back(name, first->second);
      continue;
    }
    const zip::ElementType* type = elementTypeOf(t.scalar_type());
    if (!type) throw CheckpointError(fmt::format("{}: '{}' is of a type safetensors does not hold", path, name));
    entries.push_back({name, type->code, t.sizes().vec(), 0, 0});
    data.push_back(t.contiguous());
  }
  const std::string header = writeSafetensorsHeader(entries, ties);
  rundir::AtomicFile file(path);
  file.write(header.data(), header.size());
  for (const at::Tensor& t : data) file.write(t.data_ptr(), t.nbytes());
  file.commit();
}

}  // namespace

void writeWeightsFile(const std::string& path, const TensorList& tensors, const Ties& ties) {
  if (endsWith(path, ".safetensors")) return writeSafetensors(path, tensors, ties);
  writeStateDict(path, tensors);
}

}  // namespace pstrain::checkpoint
