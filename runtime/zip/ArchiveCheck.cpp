#include "runtime/zip/ArchiveCheck.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>

#include "runtime/Text.h"

namespace pstrain::zip {
namespace {

// How an opcode's argument follows it.
enum class Arg { None, Fixed1, Fixed2, Fixed4, Fixed8, Len1, Len4, Lines2, Memo1, Memo4 };

// What an opcode pushes, as far as the check follows values: only the parts of a storage's
// persistent id (strings, small ints, the storage type's GLOBAL, the tuple of them).
enum class Makes {
  Nothing,   // pushes nothing
  Other,     // a value the check does not follow
  Mark,      // MARK
  Int,       // the argument as an integer
  Text,      // the argument as a string
  Global,    // the argument's two lines: module and name
  Tuple,     // a tuple of the items it took
  MemoGet,   // the memo entry the argument names
  MemoPut,   // takes the top, memoizes it as the next entry and puts it back
  Storage,   // BINPERSID: takes a storage's persistent id, checked, and pushes the storage
};

// One row per opcode that libtorch's unpickler reads, with what it does to the stack as
// libtorch carries it out; every pop is checked against the items above the innermost
// MARK, as Python's own unpickler requires.
struct Opcode {
  unsigned char code;
  const char* name;
  Arg arg;
  Makes makes;
  int pops = 0;         // items taken from above the innermost mark (and at least these)
  bool toMark = false;  // takes every item above the innermost mark, and the mark
  bool pairs = false;   // ... which must come in key/value pairs
  int under = 0;        // with toMark: items that must be below the mark (APPENDS' list)
};

constexpr Opcode kOpcodes[] = {
    {0x80, "PROTO", Arg::Fixed1, Makes::Nothing},
    {'(', "MARK", Arg::None, Makes::Mark},
    {'.', "STOP", Arg::None, Makes::Nothing, 1},
    {')', "EMPTY_TUPLE", Arg::None, Makes::Tuple},
    {'}', "EMPTY_DICT", Arg::None, Makes::Other},
    {']', "EMPTY_LIST", Arg::None, Makes::Other},
    {'N', "NONE", Arg::None, Makes::Other},
    {0x88, "NEWTRUE", Arg::None, Makes::Other},
    {0x89, "NEWFALSE", Arg::None, Makes::Other},
    {'K', "BININT1", Arg::Fixed1, Makes::Int},
    {'M', "BININT2", Arg::Fixed2, Makes::Int},
    {'J', "BININT", Arg::Fixed4, Makes::Int},
    {'G', "BINFLOAT", Arg::Fixed8, Makes::Other},
    {0x8a, "LONG1", Arg::Len1, Makes::Int},
    {0x8b, "LONG4", Arg::Len4, Makes::Int},
    {'U', "SHORT_BINSTRING", Arg::Len1, Makes::Text},
    {'T', "BINSTRING", Arg::Len4, Makes::Text},
    {'X', "BINUNICODE", Arg::Len4, Makes::Text},
    {'C', "SHORT_BINBYTES", Arg::Len1, Makes::Other},
    {'B', "BINBYTES", Arg::Len4, Makes::Other},
    {'c', "GLOBAL", Arg::Lines2, Makes::Global},
    {'q', "BINPUT", Arg::Memo1, Makes::MemoPut, 1},
    {'r', "LONG_BINPUT", Arg::Memo4, Makes::MemoPut, 1},
    {'h', "BINGET", Arg::Memo1, Makes::MemoGet},
    {'j', "LONG_BINGET", Arg::Memo4, Makes::MemoGet},
    {0x85, "TUPLE1", Arg::None, Makes::Tuple, 1},
    {0x86, "TUPLE2", Arg::None, Makes::Tuple, 2},
    {0x87, "TUPLE3", Arg::None, Makes::Tuple, 3},
    {'t', "TUPLE", Arg::None, Makes::Tuple, 0, true},
    {'l', "LIST", Arg::None, Makes::Other, 0, true},
    {'d', "DICT", Arg::None, Makes::Other, 0, true, true},
    {'a', "APPEND", Arg::None, Makes::Other, 2},        // list, item -> list
    {'e', "APPENDS", Arg::None, Makes::Nothing, 0, true, false, 1},
    {'s', "SETITEM", Arg::None, Makes::Other, 3},       // dict, key, value -> dict
    {'u', "SETITEMS", Arg::None, Makes::Nothing, 0, true, true, 1},
    {'R', "REDUCE", Arg::None, Makes::Other, 2},        // callable, args
    {'b', "BUILD", Arg::None, Makes::Other, 2},         // object, state
    {0x81, "NEWOBJ", Arg::None, Makes::Other, 2},       // class, args: PickleObjects::Allowed only
    {'Q', "BINPERSID", Arg::None, Makes::Storage, 1},
    {'0', "POP", Arg::None, Makes::Nothing, 1},
};

const Opcode* opcodeOf(unsigned char code) {
  for (const Opcode& op : kOpcodes) {
    if (op.code == code) return &op;
  }
  return nullptr;
}

// A storage type's element size by its pickled name (torch.<Type>Storage), as libtorch
// knows them; 0 for any other name.
std::size_t elementSizeOf(std::string_view storage) {
  static const std::pair<const char*, std::size_t> kSizes[] = {
      {"ByteStorage", 1},   {"CharStorage", 1},         {"ShortStorage", 2},         {"IntStorage", 4},
      {"LongStorage", 8},   {"HalfStorage", 2},         {"FloatStorage", 4},         {"DoubleStorage", 8},
      {"ComplexHalfStorage", 4}, {"ComplexFloatStorage", 8}, {"ComplexDoubleStorage", 16},
      {"BoolStorage", 1},   {"QInt8Storage", 1},        {"QUInt8Storage", 1},        {"QInt32Storage", 4},
      {"BFloat16Storage", 2}, {"QUInt4x2Storage", 1},   {"QUInt2x4Storage", 1}};
  for (const auto& [name, size] : kSizes) {
    if (storage == name) return size;
  }
  return 0;
}

// A value as far as the check follows it. Strings are views into the pickle and tuples are
// shared, so that a pickle that fetches one value from the memo many times costs the check
// no more than it costs the pickle.
struct Value {
  Makes kind = Makes::Other;  // Other, Int, Text, Global, Tuple or Storage
  std::int64_t number = 0;    // Int: its value; Storage: its element count
  std::string_view text, name;  // Text: text; Global: module (text) and name
  std::shared_ptr<const std::vector<Value>> items;
};

// The archive's records by their lower-case names: where their bytes are, and whether
// they are stored (else deflated: their bytes as they are in the file).
struct Record {
  std::string_view bytes;
  bool stored = true;
};
using Records = std::map<std::string, Record>;

class PickleCheck {
 public:
  PickleCheck(std::string_view pickle, std::string storagePrefix, const Records& records, bool objects,
              const Fail& fail)
      : p_(pickle), storagePrefix_(lowerCase(std::move(storagePrefix))), records_(records), objects_(objects), fail_(fail) {}

  // Runs the pickle to its STOP; returns what its GLOBALs name, and adds the records of the
  // storages it names (of one element or more) to `storages` (unless null).
  std::vector<PickleGlobal> run(std::set<std::string>* storages) {
    storages_ = storages;
    while (pos_ < p_.size()) {
      const std::size_t at = pos_;
      const unsigned char code = static_cast<unsigned char>(p_[pos_++]);
      const Opcode* op = opcodeOf(code);
      if (!op || (code == 0x81 && !objects_)) {
        fail(fmt::format("unsupported pickle opcode 0x{:02x} at byte {}", code, at));
      }
      step(*op, at);
      if (code == '.') return std::move(globals_);
    }
    fail("pickle has no STOP");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    fail_(what);
    throw std::logic_error("zip::Fail returned");  // fail_ must throw
  }

  void need(std::size_t n) const {
    if (p_.size() - pos_ < n) fail(fmt::format("pickle ends inside an argument at byte {}", pos_));
  }
  std::uint64_t fixed(int width) {
    need(static_cast<std::size_t>(width));
    const std::uint64_t n = littleEndian(reinterpret_cast<const unsigned char*>(p_.data() + pos_), width);
    pos_ += static_cast<std::size_t>(width);
    return n;
  }
  std::string_view bytes(std::uint64_t n) {
    need(n);
    const std::string_view b = p_.substr(pos_, n);
    pos_ += n;
    return b;
  }
  std::string_view line() {
    const std::size_t end = p_.find('\n', pos_);
    if (end == std::string_view::npos) fail("unterminated GLOBAL");
    const std::string_view text = p_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return text;
  }
  std::size_t above() const { return stack_.size() - (marks_.empty() ? 0 : marks_.back()); }

  // The opcode's argument, as the value it makes where the check follows it.
  Value argument(const Opcode& op) {
    Value v;
    v.kind = op.makes;
    switch (op.arg) {
      case Arg::None: break;
      case Arg::Fixed1: v.number = static_cast<std::int64_t>(fixed(1)); break;
      case Arg::Fixed2: v.number = static_cast<std::int64_t>(fixed(2)); break;
      case Arg::Fixed4: v.number = static_cast<std::int32_t>(fixed(4)); break;  // BININT is signed
      case Arg::Fixed8: fixed(8); break;
      case Arg::Len1: case Arg::Len4: {
        const std::string_view b = bytes(fixed(op.arg == Arg::Len1 ? 1 : 4));
        v.text = b;
        if (op.makes == Makes::Int) {  // LONG1/LONG4: little-endian two's complement
          if (b.size() > 8) {
            v.kind = Makes::Other;
          } else if (!b.empty()) {
            std::uint64_t n = littleEndian(reinterpret_cast<const unsigned char*>(b.data()), static_cast<int>(b.size()));
            if (b.size() < 8 && (static_cast<unsigned char>(b.back()) & 0x80)) n |= ~std::uint64_t{0} << (8 * b.size());
            v.number = static_cast<std::int64_t>(n);
          }
        }
        break;
      }
      case Arg::Lines2: v.text = line(); v.name = line(); break;
      case Arg::Memo1: case Arg::Memo4: v.number = static_cast<std::int64_t>(fixed(op.arg == Arg::Memo1 ? 1 : 4)); break;
    }
    return v;
  }

  void step(const Opcode& op, std::size_t at) {
    Value made = argument(op);
    std::vector<Value> taken;
    if (op.makes == Makes::Mark) {
      marks_.push_back(stack_.size());
      return;
    }
    if (op.toMark) {
      if (marks_.empty()) fail(fmt::format("{} at byte {} without a MARK", op.name, at));
      const std::size_t count = above();
      if (op.pairs && count % 2 != 0) fail(fmt::format("odd number of dict items at byte {}", at));
      taken.assign(stack_.end() - static_cast<std::ptrdiff_t>(count), stack_.end());
      stack_.resize(stack_.size() - count);
      marks_.pop_back();
      if (above() < static_cast<std::size_t>(op.under)) fail(fmt::format("pickle stack underflow at byte {}", at));
    } else {
      if (above() < static_cast<std::size_t>(op.pops)) fail(fmt::format("pickle stack underflow at byte {}", at));
      taken.assign(stack_.end() - op.pops, stack_.end());
      stack_.resize(stack_.size() - static_cast<std::size_t>(op.pops));
    }
    switch (op.makes) {
      case Makes::Nothing: case Makes::Mark: return;
      case Makes::Global: globals_.push_back({std::string(made.text), std::string(made.name)}); break;
      case Makes::Tuple: made.items = std::make_shared<const std::vector<Value>>(std::move(taken)); break;
      case Makes::MemoGet:
        if (made.number < 0 || static_cast<std::size_t>(made.number) >= memo_.size()) {
          fail(fmt::format("memo id {} read before it is set at byte {}", made.number, at));
        }
        made = memo_[static_cast<std::size_t>(made.number)];
        break;
      case Makes::MemoPut:
        // libtorch appends whatever id is given: only ids in order mean the same to both.
        if (made.number < 0 || static_cast<std::size_t>(made.number) != memo_.size()) {
          fail(fmt::format("memo id {} out of order at byte {}", made.number, at));
        }
        memo_.push_back(taken[0]);
        made = taken[0];
        break;
      case Makes::Storage: made = checkStorage(taken[0], at); break;
      case Makes::Other: case Makes::Int: case Makes::Text: break;
    }
    if (op.code == 'R') checkRebuild(taken[0], taken[1], at);
    stack_.push_back(std::move(made));
  }

  // A persistent id as libtorch's unpickler takes it: ("storage", type, key, device,
  // elements), which it sizes at elements x the type's size whatever its record holds.
  // Returns the storage: its element count.
  Value checkStorage(const Value& id, std::size_t at) {
    const auto bad = [&](const std::string& what) { fail(fmt::format("persistent id at byte {}: {}", at, what)); };
    if (id.kind != Makes::Tuple || id.items->size() != 5) bad("not a storage's (\"storage\", type, key, device, size)");
    const std::vector<Value>& part = *id.items;
    if (part[0].kind != Makes::Text || part[0].text != "storage") bad("not a storage");
    const std::size_t element = part[1].kind == Makes::Global && part[1].text == "torch" ? elementSizeOf(part[1].name) : 0;
    if (element == 0) bad("its type is not one of torch's storage types");
    if (part[2].kind != Makes::Text || part[3].kind != Makes::Text) bad("its key or device is not a string");
    if (part[4].kind != Makes::Int || part[4].number < 0) bad("its size is not a count of elements");
    const std::string key(part[2].text);
    const std::uint64_t count = static_cast<std::uint64_t>(part[4].number);
    Value storage;
    storage.kind = Makes::Storage;
    storage.number = part[4].number;
    if (count == 0) return storage;  // libtorch reads no record for it
    const auto record = records_.find(storagePrefix_ + lowerCase(key));
    if (record == records_.end()) bad(fmt::format("storage '{}' has no record", key));
    if (!record->second.stored) bad(fmt::format("storage '{}' is compressed", key));
    const std::uint64_t bytes = record->second.bytes.size();
    if (count > bytes / element || count * element != bytes) {
      bad(fmt::format("storage '{}' declares {} elements of {} bytes, but its record holds {} bytes", key, count,
                      element, bytes));
    }
    if (storages_) storages_->insert(record->first);
    return storage;
  }

  // REDUCE of `callable` with `args`: a tensor rebuilt from a storage must be a view within it.
  void checkRebuild(const Value& callable, const Value& args, std::size_t at) {
    if (callable.kind != Makes::Global || callable.text != "torch._utils") return;
    const auto bad = [&](const std::string& what) { fail(fmt::format("tensor at byte {}: {}", at, what)); };
    if (callable.name == "_rebuild_sparse_tensor") bad("a sparse tensor (pstrain reads dense tensors only)");
    if (callable.name != "_rebuild_tensor_v2" && callable.name != "_rebuild_qtensor") return;
    if (args.kind != Makes::Tuple || args.items->size() < 4) bad("not (storage, offset, sizes, strides, ...)");
    const std::vector<Value>& part = *args.items;
    if (part[0].kind != Makes::Storage) bad("not rebuilt from a storage");
    if (part[1].kind != Makes::Int || part[1].number < 0) bad("its offset is not a count of elements");
    const auto integers = [&](const Value& v, const char* what) {
      std::vector<std::int64_t> out;
      if (v.kind != Makes::Tuple) bad(fmt::format("its {} are not a tuple", what));
      for (const Value& item : *v.items) {
        if (item.kind != Makes::Int || item.number < 0) bad(fmt::format("its {} are not counts of elements", what));
        out.push_back(item.number);
      }
      return out;
    };
    const std::vector<std::int64_t> sizes = integers(part[2], "sizes"), strides = integers(part[3], "strides");
    if (sizes.size() != strides.size()) bad("it has as many sizes as strides");
    // The last element's index from the storage's start; past 2^64 it is out of bounds anyway.
    unsigned __int128 last = static_cast<std::uint64_t>(part[1].number);
    for (std::size_t d = 0; d < sizes.size(); ++d) {
      if (sizes[d] == 0) return;  // no element: nothing is read
      if (last <= std::numeric_limits<std::uint64_t>::max()) {
        last += static_cast<unsigned __int128>(sizes[d] - 1) * static_cast<std::uint64_t>(strides[d]);
      }
    }
    if (last >= static_cast<std::uint64_t>(part[0].number)) {
      bad(fmt::format("reaches past its storage of {} elements (sizes {}, strides {}, offset {})", part[0].number,
                      fmt::join(sizes, "x"), fmt::join(strides, ","), part[1].number));
    }
  }

  std::string_view p_;
  std::string storagePrefix_;  // lower case: "<root>/data/"
  const Records& records_;
  bool objects_;  // NEWOBJ: objects of the file's classes
  const Fail& fail_;
  std::set<std::string>* storages_ = nullptr;
  std::size_t pos_ = 0;
  std::vector<Value> stack_;
  std::vector<std::size_t> marks_;  // stack sizes at each open MARK
  std::vector<Value> memo_;
  std::vector<PickleGlobal> globals_;
};

}  // namespace

ArchiveContents checkArchive(std::string_view bytes, ArchiveKind kind, const Fail& fail) {
  const bool modelFile = kind == ArchiveKind::ModelFile;
  const auto read = [&](std::uint64_t at, void* out, std::size_t n) {
    if (at > bytes.size() || n > bytes.size() - at) fail("a record outside the file");
    if (n > 0) std::memcpy(out, bytes.data() + at, n);
  };
  ArchiveContents contents;
  Records records;
  std::uint64_t inflated = 0;
  for (const Entry& entry : readDirectory(bytes.size(), read, fail)) {
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
    const std::uint64_t data = dataOffset(entry, bytes.size(), read, fail);
    // libtorch finds a record by name case-insensitively (miniz's default): two names that
    // differ only in case are two records it cannot tell apart.
    const Record record{bytes.substr(data, stored ? entry.size : entry.compressedSize), stored};
    if (!records.emplace(lowerCase(entry.name), record).second) {
      fail(fmt::format("two records named {} (letter case aside)", entry.name));
    }
    if (stored) contents.stored.emplace(lowerCase(entry.name), record.bytes);
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
    contents.globals[name] = PickleCheck(pickle->second.bytes, root + name + "/", records, modelFile, fail)
                                 .run(name == "data" ? &contents.storages : nullptr);
  }
  return contents;
}

}  // namespace pstrain::zip
