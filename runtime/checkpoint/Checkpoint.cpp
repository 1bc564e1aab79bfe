#include "runtime/checkpoint/Checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/import_read.h>
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
#include "runtime/checkpoint/BytesReader.h"
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

// `t` as read from a file: libtorch does not check that its sizes, strides and offset stay
// within its storage (a crafted file makes every later read go out of bounds). Refuses one
// that does not, and returns it contiguous (what the flat copies into messages expect).
at::Tensor checkedTensor(const at::Tensor& t, const std::string& path, const std::string& name) {
  const auto fail = [&](const std::string& why) {
    return CheckpointError(fmt::format("{}: tensor '{}' {} (a damaged or crafted file)", path, name, why));
  };
  if (!t.has_storage() || t.is_sparse()) throw fail("is not a dense tensor");
  if (t.storage_offset() < 0) throw fail("has a negative offset");
  for (std::int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) < 0 || t.stride(d) < 0) throw fail("has a negative size or stride");
  }
  if (t.numel() > 0) {
    // The last element's index from the storage's start; past 2^64 it is out of bounds anyway.
    unsigned __int128 last = static_cast<std::uint64_t>(t.storage_offset());
    for (std::int64_t d = 0; d < t.dim() && last <= std::numeric_limits<std::uint64_t>::max(); ++d) {
      last += static_cast<unsigned __int128>(t.size(d) - 1) * static_cast<std::uint64_t>(t.stride(d));
    }
    if (last >= t.storage().nbytes() / std::max<std::size_t>(t.element_size(), 1)) {
      throw fail(fmt::format("reaches past its storage ({} bytes): sizes {}, strides {}, offset {}",
                             t.storage().nbytes(), t.sizes(), t.strides(), t.storage_offset()));
    }
  }
  return t.contiguous();
}

TensorList tensorList(const c10::IValue& value, const std::string& path, const std::string& what) {
  if (!value.isGenericDict()) throw CheckpointError(fmt::format("{}: '{}' is not a dict", path, what));
  TensorList list;
  for (const auto& item : value.toGenericDict()) {
    if (!item.key().isString() || !item.value().isTensor()) {
      throw CheckpointError(fmt::format("{}: '{}' holds a non-tensor entry", path, what));
    }
    const std::string& name = item.key().toStringRef();
    list.emplace_back(name, checkedTensor(item.value().toTensor(), path, what + "." + name));
  }
  return list;
}

// The whole of the regular file `path` (a FIFO or a device put in a checkpoint's place is
// refused instead of waited on).
std::string readFile(const std::string& path) {
  return rundir::readRegularFile(path, [&](const std::string& what) {
    throw CheckpointError(fmt::format("{}: {}", path, what));
  });
}

// torch::pickle_load, after zip::checkArchive, reading through a BytesReader.
c10::IValue unpickle(const std::string& bytes, const std::string& path) {
  zip::checkArchive(bytes, zip::ArchiveKind::Checkpoint, [&](const std::string& what) {
    throw CheckpointError(fmt::format("{}: not a valid checkpoint archive ({})", path, what));
  });
  try {
    caffe2::serialize::PyTorchStreamReader reader(std::make_shared<BytesReader>(bytes));
    return torch::jit::readArchiveAndTensors("data", /*pickle_prefix=*/"", /*tensor_prefix=*/"",
                                             /*type_resolver=*/c10::nullopt, /*obj_loader=*/c10::nullopt,
                                             /*device=*/c10::nullopt, reader);
  } catch (const std::exception& e) {
    std::string why = e.what();
    throw CheckpointError(fmt::format("{}: not a readable torch pickle ({})", path,
                                      why.substr(0, why.find('\n'))));
  }
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

// Decodes the unpickled dict; throws CheckpointError (or c10::Error on a type mismatch,
// which read() turns into one).
Checkpoint decode(const c10::IValue& top, const std::string& path);

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
  c10::IValue top = unpickle(bytes, path);
  try {
    Checkpoint ckpt = decode(top, path);
    if (ckpt.step != published.step) {  // another step's files copied over these
      throw CheckpointError(fmt::format("{}: holds step {}, but its name says step {} (another checkpoint's files "
                                        "copied over it?)", path, ckpt.step, published.step));
    }
    return ckpt;
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    std::string why = e.what();
    throw CheckpointError(fmt::format("{}: not a pstrain checkpoint ({})", path, why.substr(0, why.find('\n'))));
  }
}

namespace {

Checkpoint decode(const c10::IValue& top, const std::string& path) {
  if (!top.isGenericDict()) throw CheckpointError(fmt::format("{}: not a checkpoint dict", path));
  GenericDict dict = top.toGenericDict();
  for (const char* key : {"model", "optimizer", "__meta__"}) {
    if (!dict.contains(key)) throw CheckpointError(fmt::format("{}: no '{}' entry", path, key));
  }
  GenericDict meta = dict.at("__meta__").toGenericDict();
  auto metaInt = [&](const char* key) {
    if (!meta.contains(key) || !meta.at(key).isInt()) {
      throw CheckpointError(fmt::format("{}: __meta__.{} missing", path, key));
    }
    return meta.at(key).toInt();
  };
  auto metaString = [&](const char* key) {
    if (!meta.contains(key) || !meta.at(key).isString()) {
      throw CheckpointError(fmt::format("{}: __meta__.{} missing", path, key));
    }
    return meta.at(key).toStringRef();
  };
  if (metaInt("format") != kFormat) {
    throw CheckpointError(fmt::format("{}: checkpoint format {} is not {}", path, metaInt("format"), kFormat));
  }
  Checkpoint ckpt;
  ckpt.step = metaInt("step");
  ckpt.epoch = metaInt("epoch");
  ckpt.model = metaString("model");
  ckpt.dataset = metaString("dataset");
  ckpt.syntheticSize = metaInt("synthetic_size");
  ckpt.fingerprint = metaString("fingerprint");
  if (meta.contains("loss")) ckpt.loss = metaString("loss");
  if (meta.contains("model_path")) ckpt.modelPath = metaString("model_path");
  if (meta.contains("virtual_shards")) ckpt.virtualShards = metaInt("virtual_shards");
  if (meta.contains("batch_size")) ckpt.batchSize = metaInt("batch_size");
  if (meta.contains("block_size")) ckpt.blockSize = metaInt("block_size");
  if (meta.contains("ignore_index")) ckpt.ignoreIndex = metaInt("ignore_index");
  if (meta.contains("optimizer_rule")) ckpt.optimizerRule = metaString("optimizer_rule");
  if (meta.contains("configuration")) ckpt.configuration = metaString("configuration");
  if (meta.contains("init_from")) ckpt.initFrom = metaString("init_from");
  if (meta.contains("worker_batches")) {
    const c10::IValue& batches = meta.at("worker_batches");
    if (!batches.isList()) throw CheckpointError(fmt::format("{}: __meta__.worker_batches is not a list", path));
    for (const c10::IValue& batch : batches.toListRef()) {
      if (!batch.isInt() || batch.toInt() < 0) {
        throw CheckpointError(fmt::format("{}: __meta__.worker_batches holds a value that is not a batch", path));
      }
      ckpt.workerBatches.push_back(batch.toInt());
    }
  }
  ckpt.modelState = tensorList(dict.at("model"), path, "model");
  if (!dict.at("optimizer").isGenericDict()) throw CheckpointError(fmt::format("{}: 'optimizer' is not a dict", path));
  for (const auto& item : dict.at("optimizer").toGenericDict()) {
    if (!item.key().isString()) throw CheckpointError(fmt::format("{}: 'optimizer' has a key that is not a name", path));
    const std::string& name = item.key().toStringRef();
    if (name == "step") {
      if (!item.value().isInt() || item.value().toInt() < 0) throw CheckpointError(fmt::format("{}: optimizer.step", path));
      ckpt.optimizerSteps = item.value().toInt();
    } else {
      ckpt.optimizerState.emplace_back(name, tensorList(item.value(), path, "optimizer." + name));
    }
  }
  if (dict.contains("scaler")) {
    if (!dict.at("scaler").isGenericDict()) throw CheckpointError(fmt::format("{}: 'scaler' is not a dict", path));
    const GenericDict scaler = dict.at("scaler").toGenericDict();
    auto number = [&](const char* key) {
      if (!scaler.contains(key) || !(scaler.at(key).isDouble() || scaler.at(key).isInt())) {
        throw CheckpointError(fmt::format("{}: scaler.{} missing", path, key));
      }
      return scaler.at(key).isInt() ? static_cast<double>(scaler.at(key).toInt()) : scaler.at(key).toDouble();
    };
    auto whole = [&](const char* key) {
      if (!scaler.contains(key) || !scaler.at(key).isInt()) throw CheckpointError(fmt::format("{}: scaler.{} missing", path, key));
      return scaler.at(key).toInt();
    };
    ckpt.lossScale = Checkpoint::LossScale{number("scale"), whole("_growth_tracker"), whole("growth_interval")};
  }
  return ckpt;
}

}  // namespace

void writeOptimizerState(const std::string& path, const Checkpoint& ckpt, const RecordSource& source) {
  writePickle(path, optimizerDict(ckpt), nullptr, source);
}

namespace {

// The stream a TorchScript module is saved to (writeArchive): a large write within
// `stable` memory (a tensor's storage, which PyTorch's zip writer writes straight from the
// tensor's memory) is kept as where it points, to be read when the archive is written again;
// anything else is copied as it comes (the writer's own buffers do not outlive the write).
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
  // Gives [at, at + n) of the archive to `write`, the large writes' bytes through `source`.
  void give(std::uint64_t at, std::uint64_t n, const RecordSource& source, const RecordWrite& write) const {
    each(at, n, [&](const char* data, std::size_t bytes, bool large) {
      if (!large || !source || !source(data, bytes, write)) write(data, bytes);
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
    if (bytes >= kLarge && inStable()) {
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
  static constexpr std::size_t kLarge = 64 << 10;
  struct Piece {
    std::uint64_t at;
    const char* memory;  // a large write's; null: `copied`
    std::size_t bytes;
    std::string copied;
  };
  // Calls `f(data, bytes, large)` for each part of [at, at + n) in order.
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
  c10::IValue value = unpickle(readFile(path), path);
  try {
    return tensorList(value, path, "state_dict");
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointError(fmt::format("{}: not a state_dict ({})", path, e.what()));
  }
}

}  // namespace pstrain::checkpoint
