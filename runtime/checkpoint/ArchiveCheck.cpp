#include "runtime/checkpoint/ArchiveCheck.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <set>
#include <string_view>
#include <vector>

#include "runtime/Errors.h"
#include "runtime/zip/ZipDirectory.h"

namespace pstrain::checkpoint {
namespace {

std::uint64_t le(std::string_view b, std::size_t at, int width) {
  return zip::littleEndian(reinterpret_cast<const unsigned char*>(b.data() + at), width);
}

struct Fail {
  const std::string& path;
  [[noreturn]] void operator()(const std::string& what) const {
    throw CheckpointError(fmt::format("{}: not a valid checkpoint archive ({})", path, what));
  }
};

// The pickle opcodes libtorch's unpickler reads, by how their argument is encoded.
enum class Arg { None, Fixed1, Fixed2, Fixed4, Fixed8, Len1, Len4, Lines2, Put1, Put4, Get1, Get4 };

bool argumentOf(unsigned char op, Arg& arg) {
  switch (op) {
    case 0x80: arg = Arg::Fixed1; return true;                       // PROTO
    case '.': case '(': case ')': case '}': case ']': case 'N': case 0x88: case 0x89:
    case 't': case 0x85: case 0x86: case 0x87: case 'e': case 'u': case 'a': case 's':
    case 'R': case 'b': case 'Q': case '0': case 'l': case 'd': case 0x81:
      arg = Arg::None; return true;
    case 'K': arg = Arg::Fixed1; return true;                        // BININT1
    case 'M': arg = Arg::Fixed2; return true;                        // BININT2
    case 'J': arg = Arg::Fixed4; return true;                        // BININT
    case 'G': arg = Arg::Fixed8; return true;                        // BINFLOAT
    case 'U': case 'C': case 0x8a: arg = Arg::Len1; return true;     // SHORT_BINSTRING/BYTES, LONG1
    case 'X': case 'T': case 'B': case 0x8b: arg = Arg::Len4; return true;  // BINUNICODE, BINSTRING, BINBYTES, LONG4
    case 'c': arg = Arg::Lines2; return true;                        // GLOBAL
    case 'q': arg = Arg::Put1; return true;                          // BINPUT
    case 'r': arg = Arg::Put4; return true;                          // LONG_BINPUT
    case 'h': arg = Arg::Get1; return true;                          // BINGET
    case 'j': arg = Arg::Get4; return true;                          // LONG_BINGET
    default: return false;
  }
}

// What an opcode does to the unpickler's stack, as libtorch's unpickler carries it out.
// libtorch pops without checking that the items are there (a TUPLE3 on a one-item stack
// frees memory it never allocated: found by fuzz_checkpoint), so every pop is checked here
// against the items above the innermost MARK, as Python's own unpickler requires.
struct StackEffect {
  int pops = 0;         // items taken from above the innermost mark (and at least these)
  int pushes = 0;       // items put back
  bool toMark = false;  // takes every item above the innermost mark, and the mark
  bool pairs = false;   // ... which must come in key/value pairs
  int under = 0;        // with toMark: items that must be below the mark (APPENDS' list)
};

StackEffect stackEffectOf(unsigned char op) {
  switch (op) {
    case 0x80: case '(': return {};                                          // PROTO, MARK (handled)
    case '.': return {1, 0};                                                 // STOP
    case ')': case '}': case ']': case 'N': case 0x88: case 0x89: return {0, 1};
    case 'K': case 'M': case 'J': case 'G': case 'U': case 'C': case 0x8a:
    case 'X': case 'T': case 'B': case 0x8b: case 'c': case 'h': case 'j': return {0, 1};
    case 'q': case 'r': return {1, 1};                                       // BINPUT: reads the top
    case 0x85: return {1, 1};                                                // TUPLE1
    case 0x86: return {2, 1};                                                // TUPLE2
    case 0x87: return {3, 1};                                                // TUPLE3
    case 'a': return {2, 1};                                                 // APPEND: list, item
    case 's': return {3, 1};                                                 // SETITEM: dict, key, value
    case 'R': return {2, 1};                                                 // REDUCE: callable, args
    case 0x81: return {2, 1};                                                // NEWOBJ: class, args
    case 'b': return {2, 1};                                                 // BUILD: object, state
    case 'Q': return {1, 1};                                                 // BINPERSID
    case '0': return {1, 0};                                                 // POP
    case 't': case 'l': return {0, 1, true};                                 // TUPLE, LIST
    case 'd': return {0, 1, true, true};                                     // DICT
    case 'e': return {0, 0, true, false, 1};                                 // APPENDS
    case 'u': return {0, 0, true, true, 1};                                  // SETITEMS
    default: return {};
  }
}

// Checks the pickle `p` (see ArchiveCheck.h) and returns the classes its GLOBALs name.
// NEWOBJ (an object of a TorchScript class) only with `objects`: a checkpoint holds none.
std::vector<std::string> checkPickle(std::string_view p, const Fail& fail, bool objects) {
  std::vector<std::string> globals;
  std::size_t pos = 0;
  std::uint64_t memo = 0;  // ids in use: 0 .. memo-1
  std::uint64_t items = 0;             // on the stack
  std::vector<std::uint64_t> marks;    // stack sizes at each open MARK
  auto need = [&](std::size_t n) {
    if (p.size() - pos < n) fail(fmt::format("pickle ends inside an argument at byte {}", pos));
  };
  auto above = [&] { return items - (marks.empty() ? 0 : marks.back()); };  // items above the innermost mark
  while (pos < p.size()) {
    const std::size_t at = pos;
    const unsigned char op = static_cast<unsigned char>(p[pos++]);
    Arg arg;
    if (!argumentOf(op, arg) || (op == 0x81 && !objects)) {
      fail(fmt::format("unsupported pickle opcode 0x{:02x} at byte {}", op, at));
    }
    const StackEffect effect = stackEffectOf(op);
    if (op == '(') {
      marks.push_back(items);
    } else if (effect.toMark) {
      if (marks.empty()) fail(fmt::format("pickle opcode 0x{:02x} at byte {} without a MARK", op, at));
      const std::uint64_t taken = above();
      marks.pop_back();
      items -= taken;
      if (effect.pairs && taken % 2 != 0) fail(fmt::format("odd number of dict items at byte {}", at));
      if (above() < static_cast<std::uint64_t>(effect.under)) fail(fmt::format("pickle stack underflow at byte {}", at));
      items += effect.pushes;
    } else {
      if (above() < static_cast<std::uint64_t>(effect.pops)) fail(fmt::format("pickle stack underflow at byte {}", at));
      items = items - effect.pops + effect.pushes;
    }
    std::uint64_t n = 0;
    switch (arg) {
      case Arg::None: break;
      case Arg::Fixed1: need(1); pos += 1; break;
      case Arg::Fixed2: need(2); pos += 2; break;
      case Arg::Fixed4: need(4); pos += 4; break;
      case Arg::Fixed8: need(8); pos += 8; break;
      case Arg::Len1: need(1); n = le(p, pos, 1); pos += 1; need(n); pos += n; break;
      case Arg::Len4: need(4); n = le(p, pos, 4); pos += 4; need(n); pos += n; break;
      case Arg::Lines2: {
        std::string name;
        for (int line = 0; line < 2; ++line) {
          auto end = p.find('\n', pos);
          if (end == std::string_view::npos) fail("unterminated GLOBAL");
          name += std::string(line ? "." : "") + std::string(p.substr(pos, end - pos));
          pos = end + 1;
        }
        globals.push_back(std::move(name));
        break;
      }
      case Arg::Put1: case Arg::Put4: case Arg::Get1: case Arg::Get4: {
        const int width = arg == Arg::Put1 || arg == Arg::Get1 ? 1 : 4;
        need(width);
        n = le(p, pos, width);
        pos += width;
        if (arg == Arg::Get1 || arg == Arg::Get4) {
          if (n >= memo) fail(fmt::format("memo id {} read before it is set at byte {}", n, pos));
        } else {
          if (n > memo) fail(fmt::format("memo id {} out of order at byte {}", n, pos));
          if (n == memo) ++memo;
        }
        break;
      }
    }
    if (op == '.') return globals;  // STOP
  }
  fail("pickle has no STOP");
}

}  // namespace

void checkArchive(const std::string& bytes, const std::string& path) {
  const Fail fail{path};
  const std::string_view b(bytes);
  const auto read = [&](std::uint64_t at, void* out, std::size_t n) {
    if (at > b.size() || n > b.size() - at) fail("a record outside the file");
    if (n > 0) std::memcpy(out, b.data() + at, n);
  };
  const auto failWith = [&](const std::string& what) { fail(what); };
  bool sawPickle = false;
  // libtorch finds a record by name case-insensitively (miniz's default): so is data.pkl
  // found here, and two names that differ only in case are two records the loader cannot
  // tell apart (which one it reads is not the one checked).
  std::set<std::string> names;
  for (const zip::Entry& entry : zip::readDirectory(b.size(), read, failWith)) {
    if (entry.method != 0 || entry.compressedSize != entry.size) fail(fmt::format("record {} is compressed", entry.name));
    const std::uint64_t data = zip::dataOffset(entry, b.size(), read, failWith);
    std::string name = entry.name;
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    if (!names.insert(name).second) fail(fmt::format("two records named {} (letter case aside)", entry.name));
    if (name.size() >= 9 && name.compare(name.size() - 9, 9, "/data.pkl") == 0) {
      checkPickle(b.substr(data, entry.size), fail, false);
      sawPickle = true;
    }
  }
  if (!sawPickle) fail("no data.pkl record");
}

std::vector<std::string> pickleGlobals(std::string_view pickle, const std::string& path) {
  return checkPickle(pickle, Fail{path}, true);
}

}  // namespace pstrain::checkpoint
