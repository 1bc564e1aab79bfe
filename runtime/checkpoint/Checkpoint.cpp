#include "runtime/checkpoint/Checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/torch.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "runtime/Errors.h"
#include "runtime/checkpoint/ArchiveCheck.h"

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

TensorList tensorList(const c10::IValue& value, const std::string& path, const std::string& what) {
  if (!value.isGenericDict()) throw CheckpointError(fmt::format("{}: '{}' is not a dict", path, what));
  TensorList list;
  for (const auto& item : value.toGenericDict()) {
    if (!item.key().isString() || !item.value().isTensor()) {
      throw CheckpointError(fmt::format("{}: '{}' holds a non-tensor entry", path, what));
    }
    list.emplace_back(item.key().toStringRef(), item.value().toTensor());
  }
  return list;
}

std::uint32_t crc32Of(const std::string& bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  std::size_t offset = 0;
  while (offset < bytes.size()) {
    uInt n = static_cast<uInt>(std::min<std::size_t>(bytes.size() - offset, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + offset), n);
    offset += n;
  }
  return static_cast<std::uint32_t>(crc);
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError(fmt::format("{}: cannot open", path));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void syncDirectory(const fs::path& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

std::string stepName(std::int64_t step) { return fmt::format("step-{:08d}", step); }

// A read adapter that never reads past the end of its bytes. torch::pickle_load's own
// in-memory reader copies whatever range the zip directory names, so a crafted or damaged
// archive makes it read out of bounds (found by tests/fuzz/fuzz_checkpoint).
class BoundedReader : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BoundedReader(const std::string& bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= bytes_.size()) return 0;
    n = std::min<size_t>(n, bytes_.size() - pos);
    std::memcpy(buf, bytes_.data() + pos, n);
    return n;
  }

 private:
  const std::string& bytes_;
};

// torch::pickle_load, after checkArchive, reading through a BoundedReader.
c10::IValue unpickle(const std::string& bytes, const std::string& path) {
  checkArchive(bytes, path);
  try {
    caffe2::serialize::PyTorchStreamReader reader(std::make_shared<BoundedReader>(bytes));
    return torch::jit::readArchiveAndTensors("data", /*pickle_prefix=*/"", /*tensor_prefix=*/"",
                                             /*type_resolver=*/c10::nullopt, /*obj_loader=*/c10::nullopt,
                                             /*device=*/c10::nullopt, reader);
  } catch (const std::exception& e) {
    std::string why = e.what();
    throw CheckpointError(fmt::format("{}: not a readable torch pickle ({})", path,
                                      why.substr(0, why.find('\n'))));
  }
}

}  // namespace

void atomicWrite(const std::string& path, const std::string& bytes) {
  fs::path target(path);
  fs::path temp = target;
  temp += fmt::format(".tmp{}", ::getpid());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    throw CheckpointError(fmt::format("{}: cannot create ({}); is the directory writable?",
                                      temp.string(), std::strerror(errno)));
  }
  std::size_t written = 0;
  while (written < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      int err = errno;
      ::close(fd);
      ::unlink(temp.c_str());
      throw CheckpointError(fmt::format("{}: write failed ({})", temp.string(), std::strerror(err)));
    }
    written += static_cast<std::size_t>(n);
  }
  bool synced = ::fsync(fd) == 0;
  bool closed = ::close(fd) == 0;
  if (!synced || !closed || ::rename(temp.c_str(), target.c_str()) != 0) {
    int err = errno;
    ::unlink(temp.c_str());
    throw CheckpointError(fmt::format("{}: could not be saved ({})", path, std::strerror(err)));
  }
  syncDirectory(target.parent_path());
}

std::string publish(const std::string& dir, const Checkpoint& ckpt) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw CheckpointError(fmt::format("{}: cannot create directory ({})", dir, ec.message()));

  GenericDict meta = stringKeyedDict();
  meta.insert("format", kFormat);
  meta.insert("step", ckpt.step);
  meta.insert("epoch", ckpt.epoch);
  meta.insert("model", ckpt.model);
  meta.insert("dataset", ckpt.dataset);
  meta.insert("synthetic_size", ckpt.syntheticSize);
  meta.insert("fingerprint", ckpt.fingerprint);
  GenericDict optimizer = stringKeyedDict();
  optimizer.insert("momentum_buffer", tensorDict(ckpt.momentum));
  GenericDict top = stringKeyedDict();
  top.insert("model", tensorDict(ckpt.modelState));
  top.insert("optimizer", optimizer);
  top.insert("__meta__", meta);
  std::vector<char> pickled = torch::pickle_save(top);
  std::string bytes(pickled.begin(), pickled.end());

  fs::path base = fs::path(dir) / stepName(ckpt.step);
  std::string ptPath = base.string() + ".pt";
  atomicWrite(ptPath, bytes);
  atomicWrite(base.string() + ".ok",
              fmt::format("pstrain-checkpoint {}\nbytes {}\ncrc32 {:08x}\n", kFormat, bytes.size(),
                          crc32Of(bytes)));
  return ptPath;
}

std::vector<Published> listPublished(const std::string& dir) {
  std::vector<Published> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return found;
  static const std::regex name(R"(step-(\d{8,})\.ok)");
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    std::string file = entry.path().filename().string();
    if (!std::regex_match(file, m, name)) continue;
    std::int64_t step = std::stoll(m[1]);
    found.push_back({step, (fs::path(dir) / (stepName(step) + ".pt")).string()});
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return found;
}

namespace {

// Decodes the unpickled dict; throws CheckpointError (or c10::Error on a type mismatch,
// which read() turns into one).
Checkpoint decode(const c10::IValue& top, const std::string& path);

}  // namespace

Checkpoint read(const Published& published) {
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
  if (crc32Of(bytes) != expectedCrc) {
    throw CheckpointError(fmt::format("{}: checksum mismatch (the file is corrupt)", path));
  }
  c10::IValue top = unpickle(bytes, path);
  try {
    return decode(top, path);
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
  ckpt.modelState = tensorList(dict.at("model"), path, "model");
  if (!dict.at("optimizer").isGenericDict() || !dict.at("optimizer").toGenericDict().contains("momentum_buffer")) {
    throw CheckpointError(fmt::format("{}: 'optimizer' has no momentum_buffer", path));
  }
  ckpt.momentum = tensorList(dict.at("optimizer").toGenericDict().at("momentum_buffer"), path,
                             "optimizer.momentum_buffer");
  return ckpt;
}

}  // namespace

void writeStateDict(const std::string& path, const TensorList& state) {
  std::vector<char> pickled = torch::pickle_save(tensorDict(state));
  atomicWrite(path, std::string(pickled.begin(), pickled.end()));
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
