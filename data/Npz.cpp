#include "data/Npz.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>

#include "data/ReadAt.h"
#include "runtime/Errors.h"
#include "runtime/FileLimits.h"
#include "runtime/zip/ZipDirectory.h"

namespace pstrain::data {
namespace {

constexpr std::size_t kMaxHeader = 1 << 20;  // .npy headers are a few hundred bytes

std::uint64_t le(const unsigned char* p, int bytes) { return zip::littleEndian(p, bytes); }

// One member's uncompressed bytes, in order, whatever its method; finish() checks that all
// of them were read and that their CRC-32 is the directory's.
class MemberStream {
 public:
  MemberStream(int fd, std::uint64_t fileSize, const NpzFile::Member& m, std::string what)
      : fd_(fd), m_(m), what_(std::move(what)) {
    next_ = zip::dataOffset(m, fileSize, [&](std::uint64_t at, void* out, std::size_t n) { readAt(fd, at, out, n, what_); },
                            [&](const std::string& why) { throw DataError(fmt::format("{}: {}", what_, why)); });
    end_ = next_ + m.compressedSize;
    if (m.method == 0 && m.size != m.compressedSize) {
      throw DataError(fmt::format("{}: corrupt zip directory (a stored member of two sizes)", what_));
    }
    if (m.method == 8) {
      if (inflateInit2(&z_, -MAX_WBITS) != Z_OK) throw DataError(fmt::format("{}: cannot start inflating", what_));
      inflating_ = true;
      in_.resize(1 << 20);
    } else if (m.method != 0) {
      throw DataError(fmt::format("{}: compression method {} (np.savez and np.savez_compressed use 0 and 8)", what_,
                                  m.method));
    }
  }
  ~MemberStream() {
    if (inflating_) inflateEnd(&z_);
  }

  void read(void* out, std::size_t n) {
    if (n > m_.size - produced_) throw DataError(fmt::format("{}: shorter than its header says", what_));
    auto* p = static_cast<unsigned char*>(out);
    if (!inflating_) {
      readAt(fd_, next_, p, n, what_);
      next_ += n;
    } else {
      std::size_t done = 0;
      while (done < n) {
        if (z_.avail_in == 0) {
          const std::size_t chunk = static_cast<std::size_t>(std::min<std::uint64_t>(in_.size(), end_ - next_));
          if (chunk == 0) throw DataError(fmt::format("{}: truncated or corrupt compressed data", what_));
          readAt(fd_, next_, in_.data(), chunk, what_);
          next_ += chunk;
          z_.next_in = in_.data();
          z_.avail_in = static_cast<uInt>(chunk);
        }
        const std::size_t want = std::min<std::size_t>(n - done, std::numeric_limits<uInt>::max());
        z_.next_out = p + done;
        z_.avail_out = static_cast<uInt>(want);
        const int rc = inflate(&z_, Z_NO_FLUSH);
        done += want - z_.avail_out;
        if (rc == Z_STREAM_END && done < n) throw DataError(fmt::format("{}: compressed data end early", what_));
        if (rc != Z_OK && rc != Z_STREAM_END && !(rc == Z_BUF_ERROR && z_.avail_in == 0)) {
          throw DataError(fmt::format("{}: corrupt compressed data ({})", what_, z_.msg ? z_.msg : "inflate failed"));
        }
      }
    }
    for (std::size_t offset = 0; offset < n;) {
      const auto part = static_cast<uInt>(std::min<std::size_t>(n - offset, 1u << 30));
      crc_ = crc32(crc_, p + offset, part);
      offset += part;
    }
    produced_ += n;
  }

  void finish() {
    if (produced_ != m_.size) throw DataError(fmt::format("{}: longer than its header says", what_));
    if (crc_ != m_.crc) throw DataError(fmt::format("{}: CRC-32 mismatch (the file is corrupt)", what_));
  }

 private:
  int fd_;
  NpzFile::Member m_;
  std::string what_;
  std::uint64_t next_ = 0, end_ = 0, produced_ = 0;
  uLong crc_ = crc32(0, nullptr, 0);
  bool inflating_ = false;
  z_stream z_{};
  std::vector<unsigned char> in_;
};

// The value text of 'key' in a .npy header dict ("{'descr': '<f4', 'fortran_order': False,
// 'shape': (3, 4), }"), up to the next top-level comma or brace.
std::string headerField(const std::string& header, const std::string& key, const std::string& what) {
  const std::string quoted = "'" + key + "'";
  auto at = header.find(quoted);
  if (at == std::string::npos) throw DataError(fmt::format("{}: .npy header has no {}", what, quoted));
  if (header.find(quoted, at + quoted.size()) != std::string::npos) {  // NumPy's reader takes the last, a reader of the first
    throw DataError(fmt::format("{}: its .npy header names {} twice (readers disagree on which counts: a damaged or "
                                "crafted file); write it again with np.save", what, quoted));
  }
  at = header.find(':', at + quoted.size());
  if (at == std::string::npos) throw DataError(fmt::format("{}: malformed .npy header", what));
  std::size_t end = at + 1;
  for (int depth = 0; end < header.size(); ++end) {
    const char c = header[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
    if (depth < 0) throw DataError(fmt::format("{}: malformed .npy header", what));
  }
  std::string value = header.substr(at + 1, end - at - 1);
  value.erase(0, value.find_first_not_of(' '));
  value.erase(value.find_last_not_of(' ') + 1);
  return value;
}

// The types an .npz array may hold.
const std::map<std::string, std::size_t>& npzTypes() {
  static const std::map<std::string, std::size_t> kinds = {{"u1", 1}, {"i2", 2}, {"u2", 2}, {"i4", 4},
                                                            {"i8", 8}, {"f4", 4}, {"f8", 8}};
  return kinds;
}

NpyArray parseHeader(const std::string& header, const std::string& what,
                     const std::map<std::string, std::size_t>& kinds = npzTypes()) {
  NpyArray a;
  std::string descr = headerField(header, "descr", what);
  if (descr.size() < 3 || descr.front() != '\'' || descr.back() != '\'') {
    throw DataError(fmt::format("{}: malformed dtype {}", what, descr));
  }
  descr = descr.substr(1, descr.size() - 2);
  const char order = descr[0];
  const std::string type = descr.substr(1);
  auto kind = kinds.find(type);
  if (kind == kinds.end() || (order != '<' && order != '|' && order != '=') || (order == '|' && type != "u1")) {
    std::string known;
    for (const auto& [name, size] : kinds) known += (known.empty() ? "" : ", ") + name;
    throw DataError(fmt::format("{}: dtype '{}' is not supported (little-endian {}); convert it, e.g. "
                                "x.astype(np.{})", what, descr, known, kinds.count("f4") ? "float32" : "uint16"));
  }
  a.dtype = type;
  a.itemSize = kind->second;
  const std::string fortran = headerField(header, "fortran_order", what);
  if (fortran != "False" && fortran != "True") throw DataError(fmt::format("{}: malformed fortran_order", what));
  std::string shape = headerField(header, "shape", what);
  if (shape.size() < 2 || shape.front() != '(' || shape.back() != ')') {
    throw DataError(fmt::format("{}: malformed shape {}", what, shape));
  }
  shape = shape.substr(1, shape.size() - 2);
  std::size_t i = 0;
  while (i < shape.size()) {
    while (i < shape.size() && (shape[i] == ' ' || shape[i] == ',')) ++i;
    if (i == shape.size()) break;
    std::size_t j = i;
    std::int64_t d = 0;
    while (j < shape.size() && shape[j] >= '0' && shape[j] <= '9') {
      if (d > (std::numeric_limits<std::int64_t>::max() - 9) / 10) throw DataError(fmt::format("{}: shape too large", what));
      d = d * 10 + (shape[j++] - '0');
    }
    if (j == i || a.shape.size() >= 32) throw DataError(fmt::format("{}: malformed shape ({})", what, shape));
    a.shape.push_back(d);
    i = j;
  }
  if (fortran == "True" && a.shape.size() > 1) {
    throw DataError(fmt::format("{}: stored in Fortran order; save np.ascontiguousarray(x) instead", what));
  }
  a.fortranOrder = fortran == "True";
  return a;
}

}  // namespace

NpyArray npyFileHeader(const unsigned char* head, std::size_t size, const std::map<std::string, std::size_t>& dtypes,
                       std::uint64_t& dataOffset, const std::string& what) {
  if (size < 10 || std::memcmp(head, "\x93NUMPY", 6) != 0) throw DataError(fmt::format("{}: not a .npy array", what));
  const int major = head[6];
  if (major < 1 || major > 3) throw DataError(fmt::format("{}: .npy format version {} is not supported", what, major));
  const std::size_t prefix = major == 1 ? 10 : 12;
  if (size < prefix) throw DataError(fmt::format("{}: truncated .npy header", what));
  const std::uint64_t length = major == 1 ? le(head + 8, 2) : le(head + 8, 4);
  if (length > size - prefix) {
    throw DataError(fmt::format("{}: a .npy header of {} bytes, more than pstrain reads ({})", what, length, size - prefix));
  }
  dataOffset = prefix + length;
  return parseHeader(std::string(reinterpret_cast<const char*>(head + prefix), length), what, dtypes);
}

std::uint64_t NpyArray::elements() const {
  // The one overflow-checked count of every reader (FileLimits.h); past 2^62 no file holds it.
  return elementCount(shape).value_or(std::numeric_limits<std::uint64_t>::max());
}

NpzFile::NpzFile(const std::string& path) : path_(path) {
  fd_ = openDataFile(path);
  if (fd_ < 0) {
    throw DataError(fmt::format("{}: cannot open ({}); --dataset takes a NumPy .npz file (np.savez) or a name "
                                "of --list-datasets", path, std::strerror(errno)));
  }
  try {
    fileSize_ = sizeOfDataFile(fd_, path);
    const auto read = [&](std::uint64_t at, void* out, std::size_t n) { readAt(fd_, at, out, n, path); };
    const auto fail = [&](const std::string& why) {
      throw DataError(fmt::format("{}: not an .npz file, or truncated ({}); save it with np.savez", path, why));
    };
    for (auto& entry : zip::readDirectory(fileSize_, read, fail)) {
      if (entry.encrypted) throw DataError(fmt::format("{}: member {} is encrypted", path, entry.name));
      const std::string& name = entry.name;
      if (name.size() <= 4 || name.compare(name.size() - 4, 4, ".npy") != 0) continue;
      // Deflate turns a byte into at most 1032 (258-byte matches at 2 bits each): a member
      // that claims more is a zip bomb or damaged, and its claim would size an allocation.
      constexpr std::uint64_t kDeflateRatio = 1032;
      if ((entry.method == 8 && entry.size / kDeflateRatio > entry.compressedSize + 1) ||
          (entry.method == 0 && entry.size != entry.compressedSize)) {
        throw DataError(fmt::format("{}: member {} claims {} bytes from {} stored; deflate cannot produce more than "
                                    "{}:1 (a zip bomb, or a damaged file)",
                                    path, name, entry.size, entry.compressedSize, kDeflateRatio));
      }
      const std::string array = name.substr(0, name.size() - 4);
      members_[array] = std::move(entry);
    }
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

NpzFile::~NpzFile() { ::close(fd_); }

std::vector<std::string> NpzFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, m] : members_) out.push_back(name);
  return out;
}

const NpzFile::Member& NpzFile::member(const std::string& name) const {
  auto it = members_.find(name);
  if (it == members_.end()) {
    std::string have;
    for (const auto& n : names()) have += (have.empty() ? "" : ", ") + n;
    throw DataError(fmt::format("{}: no array '{}' (it holds: {}); save it with np.savez(FILE, {}=...)", path_, name,
                                have.empty() ? "none" : have, name));
  }
  return it->second;
}

std::uint32_t NpzFile::checksum(const std::string& name) const { return member(name).crc; }

namespace {

// Reads the .npy header from `in`; returns the array's description and how many bytes
// of data follow.
NpyArray readNpyHeader(MemberStream& in, std::uint64_t memberSize, const std::string& what) {
  unsigned char prefix[10];
  if (memberSize < sizeof prefix) throw DataError(fmt::format("{}: too short for a .npy array", what));
  in.read(prefix, sizeof prefix);
  if (std::memcmp(prefix, "\x93NUMPY", 6) != 0) throw DataError(fmt::format("{}: not a .npy array", what));
  const int major = prefix[6];
  std::uint64_t length = le(prefix + 8, 2), consumed = sizeof prefix;
  if (major >= 2) {
    unsigned char more[2];
    if (memberSize < consumed + 2) throw DataError(fmt::format("{}: truncated .npy header", what));
    in.read(more, 2);
    length |= le(more, 2) << 16;
    consumed += 2;
  } else if (major != 1) {
    throw DataError(fmt::format("{}: .npy format version {} is not supported", what, major));
  }
  if (length > kMaxHeader || length > memberSize - consumed) throw DataError(fmt::format("{}: truncated .npy header", what));
  std::string header(static_cast<std::size_t>(length), '\0');
  in.read(header.data(), header.size());
  NpyArray a = parseHeader(header, what);
  const std::uint64_t elements = a.elements();
  const std::uint64_t data = memberSize - consumed - length;
  if (elements > std::numeric_limits<std::uint64_t>::max() / a.itemSize || elements * a.itemSize != data) {
    throw DataError(fmt::format("{}: holds {} bytes of data, its shape needs {} x {}", what, data, elements, a.itemSize));
  }
  return a;
}

}  // namespace

NpyArray NpzFile::header(const std::string& name) const {
  const Member& m = member(name);
  MemberStream in(fd_, fileSize_, m, fmt::format("{}: array '{}'", path_, name));
  return readNpyHeader(in, m.size, fmt::format("{}: array '{}'", path_, name));
}

NpyArray NpzFile::read(const std::string& name, const std::function<void*(const NpyArray&)>& destination) const {
  const Member& m = member(name);
  const std::string what = fmt::format("{}: array '{}'", path_, name);
  MemberStream in(fd_, fileSize_, m, what);
  NpyArray a = readNpyHeader(in, m.size, what);
  const std::uint64_t bytes = a.elements() * a.itemSize;
  void* out = destination(a);
  for (std::uint64_t done = 0; done < bytes;) {
    const std::size_t part = static_cast<std::size_t>(std::min<std::uint64_t>(bytes - done, 1u << 30));
    in.read(static_cast<char*>(out) + done, part);
    done += part;
  }
  in.finish();
  return a;
}

}  // namespace pstrain::data
