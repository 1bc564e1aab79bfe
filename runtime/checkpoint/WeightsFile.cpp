#include "runtime/checkpoint/WeightsFile.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "runtime/Errors.h"
#include "runtime/Text.h"
#include "runtime/checkpoint/Safetensors.h"
#include "runtime/rundir/AtomicFile.h"
#include "runtime/rundir/ReadFile.h"
#include "runtime/zip/ArchiveCheck.h"
#include "runtime/zip/WeightsPickle.h"

namespace pstrain::checkpoint {
namespace {

// The element types both formats hold and pstrain reads: the safetensors code, torch.save's
// storage type, libtorch's type. One row each.
struct Dtype {
  const char* code;
  const char* storage;
  at::ScalarType type;
};
constexpr Dtype kReadDtypes[] = {
    {"F32", "FloatStorage", at::kFloat}, {"F64", "DoubleStorage", at::kDouble}, {"F16", "HalfStorage", at::kHalf},
    {"BF16", "BFloat16Storage", at::kBFloat16}, {"I64", "LongStorage", at::kLong}, {"I32", "IntStorage", at::kInt},
    {"I16", "ShortStorage", at::kShort}, {"I8", "CharStorage", at::kChar}, {"U8", "ByteStorage", at::kByte},
    {"BOOL", "BoolStorage", at::kBool}};

template <typename Match>
const Dtype* findDtype(Match match) {
  for (const Dtype& d : kReadDtypes) {
    if (match(d)) return &d;
  }
  return nullptr;
}

std::string readableTypes() {
  std::string names;
  for (const Dtype& d : kReadDtypes) names += (names.empty() ? "" : ", ") + std::string(d.code);
  return names;
}

constexpr std::string_view kCompiledPrefix = "_orig_mod.";  // torch.compile's module's names

// The elements of storage `bytes` of `type` viewed as `t` says, copied; refuses a view that
// reaches past the storage.
at::Tensor viewOf(std::string_view bytes, at::ScalarType type, const zip::PickledTensor& t,
                  const std::function<void(const std::string&)>& bad) {
  const auto element = static_cast<std::int64_t>(c10::elementSize(type));
  const std::int64_t elements = static_cast<std::int64_t>(bytes.size()) / element;
  unsigned __int128 last = static_cast<std::uint64_t>(t.offset);
  bool empty = false;
  for (std::size_t d = 0; d < t.sizes.size(); ++d) {
    empty = empty || t.sizes[d] == 0;
    if (!empty) last += static_cast<unsigned __int128>(t.sizes[d] - 1) * static_cast<std::uint64_t>(t.strides[d]);
  }
  if (empty) return at::empty(t.sizes, at::TensorOptions().dtype(type));
  if (last >= static_cast<std::uint64_t>(elements)) bad("a tensor reaches past its storage");
  const at::Tensor storage = at::from_blob(const_cast<char*>(bytes.data()), {elements}, at::TensorOptions().dtype(type));
  return storage.as_strided(t.sizes, t.strides, t.offset).clone();
}

using Item = std::shared_ptr<zip::PickleValue>;
using Kind = zip::PickleValue::Kind;

bool allTensors(const Item& dict) {
  if (dict->kind != Kind::Dict || dict->items.empty()) return false;
  for (std::size_t i = 0; i < dict->items.size(); i += 2) {
    if (dict->items[i]->kind != Kind::Text || dict->items[i + 1]->kind != Kind::Tensor) return false;
  }
  return true;
}

// The state dict a pickle holds: its top dict, or the one under "model" or "state_dict".
Item stateDictOf(const Item& top, const std::function<void(const std::string&)>& bad) {
  if (allTensors(top)) return top;
  if (top->kind == Kind::Dict) {
    std::string keys;
    for (std::size_t i = 0; i < top->items.size(); i += 2) {
      const Item& key = top->items[i];
      if (key->kind != Kind::Text) continue;
      if ((key->text == "model" || key->text == "state_dict") && allTensors(top->items[i + 1])) return top->items[i + 1];
      if (keys.size() < 200) keys += (keys.empty() ? "" : ", ") + printable(key->text);
    }
    bad(fmt::format("a dict of {} that holds no state dict (a dict of names to tensors, or one under \"model\" or "
                    "\"state_dict\"); save it with torch.save(model.state_dict(), FILE)", keys.empty() ? "nothing" : keys));
  }
  bad("not a dict of tensors; save it with torch.save(model.state_dict(), FILE)");
  return nullptr;
}

TensorList readArchive(std::string_view bytes, const std::string& path) {
  const auto bad = [&](const std::string& what) {
    throw ConfigError(fmt::format("{}: {}", path, what));
  };
  const zip::ArchiveContents contents = zip::checkArchive(bytes, zip::ArchiveKind::Checkpoint, [&](const std::string& what) {
    bad(fmt::format("not a sound torch.save archive ({})", what));
  });
  const std::string root = lowerCase(contents.root) + "/";
  const auto order = contents.stored.find(root + "byteorder");
  if (order != contents.stored.end() && order->second != "little") {
    bad("its tensors are big-endian (its byteorder record); save it again on a little-endian machine");
  }
  const Item top = zip::readWeightsPickle(contents.stored.at(root + "data.pkl"), [&](const std::string& what) {
    bad(fmt::format("not a file of weights ({})", what));
  });
  const Item dict = stateDictOf(top, bad);
  // Views of its storages, copied: no more than a few times the file (a tie is a storage
  // viewed twice), however often a crafted pickle names one storage.
  const std::uint64_t limit = 4 * static_cast<std::uint64_t>(bytes.size()) + (1 << 20);
  std::uint64_t made = 0;
  TensorList tensors;
  for (std::size_t i = 0; i < dict->items.size(); i += 2) {
    std::string name = dict->items[i]->text;
    const zip::PickledTensor& t = dict->items[i + 1]->tensor;
    const Dtype* dtype = findDtype([&](const Dtype& d) { return t.storageType == d.storage; });
    if (!dtype) {
      bad(fmt::format("'{}' is a tensor of {}; pstrain reads {} tensors", printable(name), printable(t.storageType),
                      readableTypes()));
    }
    const auto record = contents.stored.find(root + "data/" + lowerCase(t.key));
    const std::string_view storage = record == contents.stored.end() ? std::string_view() : record->second;
    if (name.compare(0, kCompiledPrefix.size(), kCompiledPrefix) == 0) name.erase(0, kCompiledPrefix.size());
    std::uint64_t elements = 1;
    for (std::int64_t size : t.sizes) elements = std::min<std::uint64_t>(elements * static_cast<std::uint64_t>(size), limit);
    made += elements * c10::elementSize(dtype->type);
    if (made > limit) bad(fmt::format("its tensors view its storages more than 4 times over (at '{}')", printable(name)));
    tensors.emplace_back(name, viewOf(storage, dtype->type, t, [&](const std::string& what) {
                           bad(fmt::format("'{}': {}", printable(name), what));
                         }));
  }
  return tensors;
}

TensorList readSafetensors(std::string_view bytes, const std::string& path) {
  const SafetensorsHeader header = readSafetensorsHeader(bytes, [&](const std::string& what) {
    throw ConfigError(fmt::format("{}: neither torch.save's archive (a zip) nor a safetensors file pstrain reads ({})",
                                  path, what));
  });
  TensorList tensors;
  for (const SafetensorsEntry& e : header.tensors) {
    const Dtype* dtype = findDtype([&](const Dtype& d) { return e.dtype == d.code; });
    if (!dtype) {
      throw ConfigError(fmt::format("{}: '{}' is a tensor of {}; pstrain reads {} tensors", path, printable(e.name),
                                    e.dtype, readableTypes()));
    }
    const char* data = bytes.data() + header.dataStart + e.begin;
    tensors.emplace_back(e.name, at::from_blob(const_cast<char*>(data), e.shape, at::TensorOptions().dtype(dtype->type)).clone());
  }
  return tensors;
}

bool startsWith(std::string_view bytes, std::string_view prefix) { return bytes.substr(0, prefix.size()) == prefix; }

// A tensor's identity as a tie shares it: the same elements of the same storage.
using TensorKey = std::tuple<const void*, std::vector<std::int64_t>, std::vector<std::int64_t>, at::ScalarType>;
TensorKey keyOf(const at::Tensor& t) {
  return {t.numel() > 0 ? t.data_ptr() : nullptr, t.sizes().vec(), t.strides().vec(), t.scalar_type()};
}

void writeSafetensors(const std::string& path, const TensorList& tensors) {
  std::vector<SafetensorsEntry> entries;
  std::vector<at::Tensor> data;
  std::vector<std::pair<std::string, std::string>> ties;
  std::map<TensorKey, std::string> written;
  for (const auto& [name, tensor] : tensors) {
    const at::Tensor t = tensor.to(torch::kCPU);
    const auto [first, fresh] = written.emplace(keyOf(t), name);
    if (!fresh && t.numel() > 0) {
      ties.emplace_back(name, first->second);
      continue;
    }
    const Dtype* dtype = findDtype([&](const Dtype& d) { return t.scalar_type() == d.type; });
    if (!dtype) throw CheckpointError(fmt::format("{}: '{}' is of a type safetensors does not hold", path, name));
    entries.push_back({name, dtype->code, t.sizes().vec(), 0, 0});
    data.push_back(t.contiguous());
  }
  const std::string header = writeSafetensorsHeader(entries, ties);
  rundir::AtomicFile file(path);
  file.write(header.data(), header.size());
  for (const at::Tensor& t : data) file.write(t.data_ptr(), t.nbytes());
  file.commit();
}

}  // namespace

TensorList readWeights(std::string_view bytes, const std::string& path) {
  if (startsWith(bytes, "PK\x03\x04")) return readArchive(bytes, path);
  // torch.save's format before PyTorch 1.6 (and with _use_new_zipfile_serialization=False):
  // a pickle (protocol 2) of its magic number, then the data's.
  if (startsWith(bytes, "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8")) {
    throw ConfigError(fmt::format("{}: torch.save's legacy format (before PyTorch 1.6, or "
                                  "_use_new_zipfile_serialization=False), which pstrain does not read: save it again "
                                  "with torch.save(torch.load(FILE), FILE)", path));
  }
  return readSafetensors(bytes, path);
}

WeightsFile readWeightsFile(const std::string& path) {
  const std::string bytes = rundir::readRegularFile(path, [&](const std::string& what) {
    throw ConfigError(fmt::format("{}: {}", path, what));
  });
  WeightsFile file;
  file.tensors = readWeights(bytes, path);
  file.identity = fmt::format("crc32 {:08x}, {} bytes", zip::crc32Of(0, bytes.data(), bytes.size()), bytes.size());
  return file;
}

void writeWeightsFile(const std::string& path, const TensorList& tensors) {
  if (endsWith(path, ".safetensors")) return writeSafetensors(path, tensors);
  writeStateDict(path, tensors);
}

}  // namespace pstrain::checkpoint
