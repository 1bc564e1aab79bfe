#include "runtime/checkpoint/Checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/torch.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <ostream>
#include <streambuf>
#include <filesystem>
#include <functional>
#include <limits>

#include "runtime/Errors.h"
#include "runtime/checkpoint/WeightsFile.h"
#include "runtime/optim/LossScale.h"
#include "runtime/rundir/AtomicFile.h"
#include "runtime/rundir/ReadFile.h"
#include "runtime/rundir/RunFiles.h"
#include "runtime/zip/ArchiveCheck.h"
#include "runtime/zip/ZipDirectory.h"
#include "runtime/zip/ZipWriter.h"

namespace pstrain::checkpoint {
namespace {

namespace fs = std::filesystem;
using GenericDict = c10::impl::GenericDict;

constexpr std::int64_t kFormat = 1;

GenericDict stringKeyedDict() { return GenericDict(c10::StringType::get(), c10::AnyType::get()); }

c10::Dict<std::string, at::Tensor> tensorDict(const TensorList& list) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [key, tensor] : list) dict.insert(key, tensor.detach().to(torch::kCPU).contiguous());
  return dict;
}

// The whole of the regular file `path` (a FIFO or a device put in a checkpoint's place is
// refused instead of waited on).
std::string readFile(const std::string& path) {
  return rundir::readRegularFile(path, [&](const std::string& what) {
    throw CheckpointError(fmt::format("{}: {}", path, what));
  });
}

struct Written {
  std::size_t bytes;
  std::uint32_t crc32;
};

// What PyTorch's writer names the format these archives are in (caffe2's
// kMinProducedFileFormatVersion), its "version" record.
constexpr const char* kProducedFormat = "3\n";

// torch::pickle_save's archive, streamed into `path` (atomically) as PyTorch's writer lays it
// out (zip::ZipWriter): the tensors go from their storages, or from `source` in pieces, to
// the file, with no copy of the archive or of a tensor in memory. Unlike pickle_save, dicts
// carry no TorchScript type tag (a call of torch.jit._pickle.restore_type_tag), which
// torch.load refuses under weights_only=True, its default since PyTorch 2.6: the file holds
// only what that safe unpickler allows (dicts, strings, ints, tensors).
// `beforeRename` runs once the file is whole and durable, just before it replaces `path`.
Written writePickle(const std::string& path, const c10::IValue& value,
                    const std::function<void()>& beforeRename = nullptr, const RecordSource& source = nullptr) {
  std::vector<char> pickle;  // the object structure; tensor data are separate records
  torch::jit::Pickler pickler([&](const char* data, std::size_t size) { pickle.insert(pickle.end(), data, data + size); },
                              /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
                              /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  rundir::AtomicFile file(path);
  zip::ZipWriter archive([&](const void* data, std::size_t size) { file.write(data, size); });
  // torch::jit::writeArchiveAndTensors's records: each tensor's storage ("data/N"), then
  // "data.pkl", then the format's version.
  const std::vector<at::Tensor>& tensors = pickler.tensorData();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    archive.record("archive/data/" + std::to_string(i), t.storage().nbytes(), [&](const zip::ZipWriter::Sink& write) {
      if (!source || !source(t.storage().data(), t.storage().nbytes(), write)) write(t.storage().data(), t.storage().nbytes());
    });
  }
  archive.record("archive/data.pkl", pickle.data(), pickle.size());
  archive.record("archive/version", kProducedFormat, std::strlen(kProducedFormat));
  archive.finish();
  file.commit(beforeRename);
  return {file.size(), file.crc32()};
}

// {name: {key: tensor}, "step": N}: the optimizer's state as torch.optim names it.
GenericDict optimizerDict(const Checkpoint& ckpt) {
  GenericDict optimizer = stringKeyedDict();
  for (const auto& [name, tensors] : ckpt.optimizerState) optimizer.insert(name, tensorDict(tensors));
  if (ckpt.optimizerSteps > 0) optimizer.insert("step", ckpt.optimizerSteps);
  return optimizer;
}

// torch.cuda.amp.GradScaler.state_dict()'s keys and types.
GenericDict scalerDict(const Checkpoint::LossScale& state) {
  GenericDict scaler = stringKeyedDict();
  scaler.insert("scale", state.scale);
  scaler.insert("growth_factor", optim::LossScale::kGrowthFactor);
  scaler.insert("backoff_factor", optim::LossScale::kBackoffFactor);
  scaler.insert("growth_interval", state.growthInterval);
  scaler.insert("_growth_tracker", state.goodSteps);
  return scaler;
}

}  // namespace

std::string publish(const std::string& dir, const Checkpoint& ckpt, const RecordSource& source) {
  try {
    ::close(rundir::openPrivateDirectory(dir));
  } catch (const ConfigError& e) {
    throw CheckpointError(e.what());
  }

  GenericDict meta = stringKeyedDict();
  meta.insert("format", kFormat);
  meta.insert("step", ckpt.step);
  meta.insert("epoch", ckpt.epoch);
  meta.insert("model", ckpt.model);
  meta.insert("dataset", ckpt.dataset);
  meta.insert("synthetic_size", ckpt.syntheticSize);
  meta.insert("fingerprint", ckpt.fingerprint);
  meta.insert("loss", ckpt.loss);
  meta.insert("model_path", ckpt.modelPath);
  meta.insert("virtual_shards", ckpt.virtualShards);
  meta.insert("batch_size", ckpt.batchSize);
  meta.insert("block_size", ckpt.blockSize);
  meta.insert("ignore_index", ckpt.ignoreIndex);
  meta.insert("optimizer_rule", ckpt.optimizerRule);
  meta.insert("configuration", ckpt.configuration);
  if (!ckpt.initFrom.empty()) meta.insert("init_from", ckpt.initFrom);
  if (!ckpt.initFromPath.empty()) meta.insert("init_from_path", ckpt.initFromPath);
  if (!ckpt.modelFacts.empty()) meta.insert("model_facts", ckpt.modelFacts);
  if (!ckpt.ties.empty()) {
    GenericDict ties = stringKeyedDict();
    for (const auto& [alias, name] : ckpt.ties) ties.insert(alias, name);
    meta.insert("ties", ties);
  }
  if (!ckpt.workerBatches.empty()) {
    c10::impl::GenericList batches(c10::AnyType::get());  // a plain list: no TorchScript tag
    for (std::int64_t batch : ckpt.workerBatches) batches.push_back(batch);
    meta.insert("worker_batches", batches);
  }
  GenericDict top = stringKeyedDict();
  top.insert("model", tensorDict(ckpt.modelState));
  top.insert("optimizer", optimizerDict(ckpt));
  top.insert("__meta__", meta);
  if (ckpt.lossScale) top.insert("scaler", scalerDict(*ckpt.lossScale));
  fs::path base = fs::path(dir) / rundir::checkpointName(ckpt.step);
  std::string ptPath = base.string() + ".pt";
  // Republishing a step (after a resume): its old marker goes once the new file is whole
  // and durable, just before that replaces the old one, so that no reader pairs the old
  // marker with the new file, and a write that fails (a full disk) leaves the old
  // checkpoint published.
  const std::string okPath = base.string() + ".ok";
  const Written pt = writePickle(
      ptPath, top, [&] {
        if (::unlink(okPath.c_str()) == 0) rundir::syncDirectory(dir);
      },
      source);
  rundir::atomicWrite(okPath,
              fmt::format("pstrain-checkpoint {}\nbytes {}\ncrc32 {:08x}\n", kFormat, pt.bytes, pt.crc32));
  return ptPath;
}

namespace {

using zip::Pickled;
using Kind = Pickled::Kind;

// A checkpoint's dict as its pickle made it (read by WeightsReader: no libtorch unpickler),
// decoded; throws CheckpointError naming `path` and the entry.
class Decoder {
 public:
  Decoder(const WeightsReader& reader, const std::string& path)
      : reader_(reader), p_(*reader.pickled()), path_(path) {}

  Checkpoint decode() {
    const Pickled::Id top = p_.top();
    if (p_.kind(top) != Kind::Dict) bad("not a checkpoint dict");
    const Pickled::Id meta = need(top, "__meta__", Kind::Dict, "__meta__");
    if (integer(meta, "format") != kFormat) {
      bad(fmt::format("checkpoint format {} is not {}", integer(meta, "format"), kFormat));
    }
    Checkpoint ckpt;
    decodeMeta(meta, ckpt);
    ckpt.modelState = tensors(need(top, "model", Kind::Dict, "model"), "model");
    const Pickled::Id optimizer = need(top, "optimizer", Kind::Dict, "optimizer");
    const std::vector<Pickled::Id>& items = p_.items(optimizer);
    for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
      if (p_.kind(items[i]) != Kind::Text) bad("'optimizer' has a key that is not a name");
      const std::string name(p_.text(items[i]));
      if (name == "step") {
        if (p_.kind(items[i + 1]) != Kind::Int || p_.integer(items[i + 1]) < 0) bad("optimizer.step is not a count");
        ckpt.optimizerSteps = p_.integer(items[i + 1]);
      } else {
        ckpt.optimizerState.emplace_back(name, tensors(items[i + 1], "optimizer." + name));
      }
    }
    if (const auto scaler = find(top, "scaler")) {
      if (p_.kind(*scaler) != Kind::Dict) bad("'scaler' is not a dict");
      ckpt.lossScale = Checkpoint::LossScale{number(*scaler, "scale"), integer(*scaler, "_growth_tracker"),
                                             integer(*scaler, "growth_interval")};
    }
    return ckpt;
  }

 private:
  [[noreturn]] void bad(const std::string& what) const { throw CheckpointError(fmt::format("{}: {}", path_, what)); }

  std::optional<Pickled::Id> find(Pickled::Id dict, const char* key) const {
    return p_.find(dict, key, [&](const std::string& what) { bad(what); });
  }
  Pickled::Id need(Pickled::Id dict, const char* key, Kind kind, const std::string& what) const {
    const auto value = find(dict, key);
    if (!value || p_.kind(*value) != kind) bad(fmt::format("{} missing", what));
    return *value;
  }
  std::int64_t integer(Pickled::Id dict, const char* key) const {
    return p_.integer(need(dict, key, Kind::Int, fmt::format("__meta__.{}", key)));
  }
  std::string text(Pickled::Id dict, const char* key) const {
    return std::string(p_.text(need(dict, key, Kind::Text, fmt::format("__meta__.{}", key))));
  }
  double number(Pickled::Id dict, const char* key) const {
    const auto value = find(dict, key);
    if (value && p_.kind(*value) == Kind::Float) return p_.real(*value);
    if (value && p_.kind(*value) == Kind::Int) return static_cast<double>(p_.integer(*value));
    bad(fmt::format("scaler.{} missing", key));
  }
  TensorList tensors(Pickled::Id dict, const std::string& what) const {
    TensorList list;
    try {
      for (const StoredTensor& t : reader_.tensorsOf(dict, "'" + what + "'")) list.emplace_back(t.name, reader_.read(t));
    } catch (const ConfigError& e) {
      throw CheckpointError(e.what());
    }
    return list;
  }

  void decodeMeta(Pickled::Id meta, Checkpoint& ckpt) const {
    ckpt.step = integer(meta, "step");
    ckpt.epoch = integer(meta, "epoch");
    ckpt.model = text(meta, "model");
    ckpt.dataset = text(meta, "dataset");
    ckpt.syntheticSize = integer(meta, "synthetic_size");
    ckpt.fingerprint = text(meta, "fingerprint");
    // Optional: checkpoints of earlier versions lack them.
    const auto has = [&](const char* key) { return find(meta, key).has_value(); };
    if (has("loss")) ckpt.loss = text(meta, "loss");
    if (has("model_path")) ckpt.modelPath = text(meta, "model_path");
    if (has("virtual_shards")) ckpt.virtualShards = integer(meta, "virtual_shards");
    if (has("batch_size")) ckpt.batchSize = integer(meta, "batch_size");
    if (has("block_size")) ckpt.blockSize = integer(meta, "block_size");
    if (has("ignore_index")) ckpt.ignoreIndex = integer(meta, "ignore_index");
    if (has("optimizer_rule")) ckpt.optimizerRule = text(meta, "optimizer_rule");
    if (has("configuration")) ckpt.configuration = text(meta, "configuration");
    if (has("init_from")) ckpt.initFrom = text(meta, "init_from");
    if (has("init_from_path")) ckpt.initFromPath = text(meta, "init_from_path");
    if (has("model_facts")) ckpt.modelFacts = text(meta, "model_facts");
    if (const auto ties = find(meta, "ties")) {
      if (p_.kind(*ties) != Kind::Dict) bad("__meta__.ties is not a dict");
      const std::vector<Pickled::Id>& pairs = p_.items(*ties);
      for (std::size_t i = 0; i + 1 < pairs.size(); i += 2) {
        if (p_.kind(pairs[i]) != Kind::Text || p_.kind(pairs[i + 1]) != Kind::Text) bad("__meta__.ties holds other than names");
        ckpt.ties.emplace_back(std::string(p_.text(pairs[i])), std::string(p_.text(pairs[i + 1])));
      }
    }
    if (const auto batches = find(meta, "worker_batches")) {
      if (p_.kind(*batches) != Kind::List) bad("__meta__.worker_batches is not a list");
      for (const Pickled::Id batch : p_.items(*batches)) {
        if (p_.kind(batch) != Kind::Int || p_.integer(batch) < 0) {
          bad("__meta__.worker_batches holds a value that is not a batch");
        }
        ckpt.workerBatches.push_back(p_.integer(batch));
      }
    }
  }

  const WeightsReader& reader_;
  const Pickled& p_;
  const std::string& path_;
};

// The archive `bytes` (of `path`) open as a file of weights; CheckpointError for one that is
// not sound.
WeightsReader openArchive(std::string_view bytes, const std::string& path) {
  if (bytes.substr(0, 4) != std::string_view("PK\x03\x04", 4)) {
    throw CheckpointError(fmt::format("{}: not a valid checkpoint archive (not a zip archive)", path));
  }
  try {
    return WeightsReader(bytes, path);
  } catch (const ConfigError& e) {
    throw CheckpointError(fmt::format("not a valid checkpoint archive: {}", e.what()));
  }
}

}  // namespace

Checkpoint read(const rundir::Published& published) {
  const std::string& path = published.path;
  std::string okPath = path.substr(0, path.size() - 3) + ".ok";
  std::string marker = readFile(okPath);
  unsigned long long expectedBytes = 0;
  unsigned expectedCrc = 0;
  int format = 0;
  if (std::sscanf(marker.c_str(), "pstrain-checkpoint %d\nbytes %llu\ncrc32 %x", &format,
                  &expectedBytes, &expectedCrc) != 3) {
    throw CheckpointError(fmt::format("{}: unreadable publication marker", okPath));
  }
  std::string bytes = readFile(path);
  if (bytes.size() != expectedBytes) {
    throw CheckpointError(fmt::format("{}: {} bytes, but {} were published (truncated or replaced)",
                                      path, bytes.size(), expectedBytes));
  }
  if (zip::crc32Of(0, bytes.data(), bytes.size()) != expectedCrc) {
    throw CheckpointError(fmt::format("{}: checksum mismatch (the file is corrupt)", path));
  }
  const WeightsReader reader = openArchive(bytes, path);
  Checkpoint ckpt = Decoder(reader, path).decode();
  if (ckpt.step != published.step) {  // another step's files copied over these
    throw CheckpointError(fmt::format("{}: holds step {}, but its name says step {} (another checkpoint's files "
                                      "copied over it?)", path, ckpt.step, published.step));
  }
  return ckpt;
}

void writeOptimizerState(const std::string& path, const Checkpoint& ckpt, const RecordSource& source) {
  writePickle(path, optimizerDict(ckpt), nullptr, source);
}

namespace {

// The stream a TorchScript module is saved to (writeArchive): a write within `stable` memory
// (a tensor's storage, which PyTorch's zip writer writes straight from the tensor's memory),
// however small, is kept as where it points, to be read through the source when the archive
// is written again: a small model's one flat storage of another server's range holds
// placeholders here (a 62 KB one was copied stale under a threshold of 64 KiB). Anything else
// is copied as it comes (the writer's own buffers do not outlive the write).
class CapturedArchive : public std::streambuf {
 public:
  explicit CapturedArchive(const std::vector<MemoryRange>& stable) : stable_(stable) {}

  // Reads [at, at + n) of the archive into `out`.
  void read(std::uint64_t at, void* out, std::size_t n) const {
    each(at, n, [&](const char* data, std::size_t bytes, bool) {
      std::memcpy(out, data, bytes);
      out = static_cast<char*>(out) + bytes;
    });
  }
  // Gives [at, at + n) of the archive to `write`, the stable writes' bytes through `source`.
  void give(std::uint64_t at, std::uint64_t n, const RecordSource& source, const RecordWrite& write) const {
    each(at, n, [&](const char* data, std::size_t bytes, bool stable) {
      if (!stable || !source || !source(data, bytes, write)) write(data, bytes);
    });
  }
  std::uint64_t size() const { return size_; }

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    const auto bytes = static_cast<std::size_t>(n);
    const auto inStable = [&] {
      return std::any_of(stable_.begin(), stable_.end(), [&](const MemoryRange& r) {
        const auto* from = static_cast<const char*>(r.data);
        return s >= from && bytes <= r.bytes && s - from <= static_cast<std::ptrdiff_t>(r.bytes - bytes);
      });
    };
    if (bytes > 0 && inStable()) {
      pieces_.push_back({size_, s, bytes, {}});
    } else {
      if (pieces_.empty() || pieces_.back().memory) pieces_.push_back({size_, nullptr, 0, {}});
      pieces_.back().copied.append(s, bytes);
      pieces_.back().bytes += bytes;
    }
    size_ += bytes;
    return n;
  }
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    const char ch = traits_type::to_char_type(c);
    xsputn(&ch, 1);
    return c;
  }

 private:
  struct Piece {
    std::uint64_t at;
    const char* memory;  // a stable write's; null: `copied`
    std::size_t bytes;
    std::string copied;
  };
  // Calls `f(data, bytes, stable)` for each part of [at, at + n) in order.
  template <typename F>
  void each(std::uint64_t at, std::uint64_t n, const F& f) const {
    auto p = std::upper_bound(pieces_.begin(), pieces_.end(), at, [](std::uint64_t x, const Piece& q) { return x < q.at; });
    for (p = p == pieces_.begin() ? p : p - 1; n > 0 && p != pieces_.end(); ++p) {
      const std::uint64_t skip = at - p->at, take = std::min<std::uint64_t>(n, p->bytes - skip);
      f((p->memory ? p->memory : p->copied.data()) + skip, static_cast<std::size_t>(take), p->memory != nullptr);
      at += take, n -= take;
    }
    if (n > 0) throw InternalError("a saved archive read past its end");
  }
  const std::vector<MemoryRange>& stable_;
  std::vector<Piece> pieces_;
  std::uint64_t size_ = 0;
};

}  // namespace

bool writeArchive(const std::string& path, const std::function<bool(std::ostream&)>& save,
                  const std::vector<MemoryRange>& stable, const RecordSource& source) {
  CapturedArchive captured(stable);
  std::ostream stream(&captured);
  if (!save(stream)) return false;
  const zip::Fail fail = [&](const std::string& what) {
    throw InternalError(fmt::format("{}: libtorch wrote an archive this program cannot read ({})", path, what));
  };
  const zip::ReadAt read = [&](std::uint64_t at, void* out, std::size_t n) { captured.read(at, out, n); };
  auto entries = zip::readDirectory(captured.size(), read, fail);
  std::sort(entries.begin(), entries.end(), [](const zip::Entry& a, const zip::Entry& b) { return a.localOffset < b.localOffset; });
  // The same records, in the same order, with every CRC computed over what is written.
  rundir::AtomicFile file(path);
  zip::ZipWriter archive([&](const void* data, std::size_t size) { file.write(data, size); });
  for (const zip::Entry& e : entries) {
    const std::uint64_t data = zip::dataOffset(e, captured.size(), read, fail);
    if (e.method == 0) {
      archive.record(e.name, e.size, [&](const zip::ZipWriter::Sink& write) { captured.give(data, e.size, source, write); });
    } else {  // TorchScript's code, deflated: copied as it is
      std::string compressed(static_cast<std::size_t>(e.compressedSize), '\0');
      captured.read(data, compressed.data(), compressed.size());
      archive.copy(e.name, e.method, e.crc, e.size, compressed);
    }
  }
  archive.finish();
  file.commit();
  return true;
}

void writeStateDict(const std::string& path, const TensorList& state, const RecordSource& source) {
  writePickle(path, tensorDict(state), nullptr, source);
}

TensorList readStateDict(const std::string& path) {
  const std::string bytes = readFile(path);
  const WeightsReader reader = openArchive(bytes, path);
  try {
    return reader.readAll();
  } catch (const ConfigError& e) {
    throw CheckpointError(e.what());
  }
}

}  // namespace pstrain::checkpoint
