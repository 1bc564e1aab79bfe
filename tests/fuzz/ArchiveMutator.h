#pragma once
// A structure-aware libFuzzer mutator for PyTorch archives (model files and checkpoints):
// it takes the input apart as a zip archive, changes one thing of its structure, and packs
// it again, so that the mutants get past the zip and CRC checks to where the hostile inputs
// of a model loader live:
//   - a name: a namespace or class renamed in every record and record name (the code and
//     the pickles alike), or a GLOBAL of the pickles pointed at another module's name;
//   - a pickle opcode: one deleted, doubled, moved, or replaced by another (GLOBAL, NEWOBJ,
//     BUILD, REDUCE, BINPERSID, MARK, TUPLE, memo PUT/GET, STOP);
//   - a declared size: a storage's element count (persistent id), its key, a memo id, a
//     string length;
//   - the zip itself: a record deflated, its declared size forged, dropped, or renamed
//     in other letter case;
//   - the layout: a record moved into a storage's data (its header, its code), a storage's
//     copy sharing its bytes, a record in a storage's header's extra field (the shapes a
//     model file's image must refuse: models/ModelFile.h);
// else (or where the input is no archive) libFuzzer's own byte-level mutation. Include it
// in one target's translation unit: it defines LLVMFuzzerCustomMutator.
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/zip/ZipDirectory.h"
#include "tests/common/ZipOf.h"

extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t maxSize);

namespace pstrain::fuzz {

using testsupport::membersOf;

// The opcodes of a pickle as [start, end) byte ranges (protocol-2 opcodes libtorch reads);
// stops at the first byte it cannot walk.
inline std::vector<std::pair<std::size_t, std::size_t>> opcodesOf(const std::string& p) {
  std::vector<std::pair<std::size_t, std::size_t>> ops;
  std::size_t at = 0;
  auto le = [&](std::size_t pos, int n) {
    std::uint64_t v = 0;
    for (int i = 0; i < n && pos + i < p.size(); ++i) v |= std::uint64_t(static_cast<unsigned char>(p[pos + i])) << (8 * i);
    return v;
  };
  while (at < p.size()) {
    const unsigned char op = static_cast<unsigned char>(p[at]);
    std::size_t end = at + 1;
    switch (op) {
      case 0x80: case 'K': case 'q': case 'h': end += 1; break;
      case 'M': end += 2; break;
      case 'J': case 'r': case 'j': end += 4; break;
      case 'G': end += 8; break;
      case 'U': case 'C': case 0x8a: end += 1 + le(at + 1, 1); break;
      case 'X': case 'T': case 'B': case 0x8b: end += 4 + le(at + 1, 4); break;
      case 'c': {
        const std::size_t first = p.find('\n', at + 1);
        const std::size_t second = first == std::string::npos ? first : p.find('\n', first + 1);
        if (second == std::string::npos) return ops;
        end = second + 1;
        break;
      }
      case '.': case '(': case ')': case '}': case ']': case 'N': case 0x88: case 0x89: case 't': case 0x85:
      case 0x86: case 0x87: case 'e': case 'u': case 'a': case 's': case 'R': case 'b': case 'Q': case '0':
      case 'l': case 'd': case 0x81:
        break;
      default: return ops;
    }
    if (end > p.size()) return ops;
    ops.emplace_back(at, end);
    at = end;
  }
  return ops;
}

// Opcodes worth putting into a pickle: the ones that make objects, read storages, name globals.
inline std::string interestingOpcode(std::mt19937_64& random) {
  static const char* const kGlobals[] = {"__torch__\nNet\n", "evil_code\nNet\n", "torch._utils\n_rebuild_tensor_v2\n",
                                         "torch.jit._pickle\nrestore_type_tag\n", "torch\nFloatStorage\n",
                                         "torch\nLongStorage\n", "collections\nOrderedDict\n", "builtins\ncomplex\n",
                                         "torch.distributed.rpc\nrref\n", "__main__\nTensorID\n",
                                         "torch._tensor\n_rebuild_from_type_v2\n", "os\nsystem\n"};
  switch (random() % 12) {
    case 0: return std::string("c") + kGlobals[random() % (sizeof kGlobals / sizeof *kGlobals)];
    case 1: return "\x81";  // NEWOBJ
    case 2: return "b";     // BUILD
    case 3: return "R";     // REDUCE
    case 4: return "Q";     // BINPERSID
    case 5: return "(";     // MARK
    case 6: return "t";     // TUPLE
    case 7: return std::string("q") + static_cast<char>(random() % 8);  // BINPUT
    case 8: return std::string("h") + static_cast<char>(random() % 8);  // BINGET
    case 9: return "X\x07\x00\x00\x00storage";
    case 10: return std::string("J") + std::string("\xff\xff\xff\x7f", 4);  // BININT 2^31 - 1
    default: return ".";
  }
}

// A declared count: a small int changed to another, or to a huge LONG1.
inline std::string forgedCount(std::mt19937_64& random) {
  switch (random() % 5) {
    case 0: return std::string("\x8a\x08\x00\x00\x00\x00\x00\x01\x00\x00", 10);  // 2^40
    case 1: return std::string("J\x00\x00\x00\x80", 5);                          // -2^31
    case 2: return std::string("K") + static_cast<char>(random() % 256);
    case 3: return std::string("M") + static_cast<char>(random() % 256) + static_cast<char>(random() % 256);
    default: return std::string("\x8a\x08", 2) + std::string(8, static_cast<char>(0xff));  // -1 as LONG1
  }
}

// `text` with every `from` replaced by `to`.
inline std::string replaced(std::string text, const std::string& from, const std::string& to) {
  if (from.empty()) return text;
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

// Whether `name` is a storage's record ("<root>/data/<key>").
inline bool isStorage(const std::string& name) {
  const std::size_t slash = name.rfind('/');
  return slash != std::string::npos && slash >= 5 && name.compare(slash - 5, 6, "/data/") == 0 && slash + 1 < name.size();
}

// The model file's image (models/ModelFile.h) leaves a large storage's data out: a record
// moved where those data are, as a crafted file hides code or names from the checks. Another
// record's local header and data inside them, or its header at their end, or a storage's
// copy sharing their bytes, or the record inside the storage's local header's extra field
// with its tail in the data (the audit's hidden code). Sets `at` (zipAt's placements).
inline bool moveIntoAStorage(std::vector<testsupport::Member>& members, std::vector<std::uint64_t>& at,
                             std::mt19937_64& random) {
  std::vector<std::size_t> storages;
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (isStorage(members[i].name) && !members[i].deflate && !members[i].data.empty()) storages.push_back(i);
  }
  if (storages.empty() || members.size() < 2) return false;
  const std::size_t storage = storages[random() % storages.size()];
  std::size_t moved = random() % members.size();
  if (moved == storage) moved = (moved + 1) % members.size();
  const std::uint64_t header = 30 + members[moved].name.size();
  const std::uint64_t length = members[storage].data.size();
  std::uint64_t offset = 0;  // from the storage's data
  switch (random() % 4) {
    case 0: offset = random() % length; break;                   // inside
    case 1: offset = length - std::min(length, header) + random() % std::min(length, header); break;  // at the end
    case 2: {                                                     // a copy sharing bytes
      testsupport::Member copy = members[storage];
      copy.name = copy.name.substr(0, copy.name.rfind('/') + 1) + std::to_string(random() % 100);
      members.push_back(copy);
      moved = members.size() - 1;
      offset = random() % length;
      break;
    }
    default: {                                                    // in the extra field, its tail in the data
      const std::uint64_t head = 1 + random() % 64;
      members[storage].extraBytes = header + head;
      offset = 0;
      at.assign(members.size(), testsupport::kAppend);
      at[moved] = 0;
      std::vector<std::uint64_t> data;
      testsupport::zipAt(members, at, &data);
      at[moved] = data[storage] - members[storage].extraBytes;
      return true;
    }
  }
  at.assign(members.size(), testsupport::kAppend);
  at[moved] = 0;
  std::vector<std::uint64_t> data;
  testsupport::zipAt(members, at, &data);
  at[moved] = data[storage] + offset;
  return true;
}

// One structural mutation of `members` (and where zipAt puts them: `at`); false if none applied.
inline bool mutateStructure(std::vector<testsupport::Member>& members, std::vector<std::uint64_t>& at,
                            std::mt19937_64& random) {
  if (members.empty()) return false;
  std::vector<std::size_t> pickles;
  for (std::size_t i = 0; i < members.size(); ++i) {
    const std::string& n = members[i].name;
    if (n.size() > 4 && n.compare(n.size() - 4, 4, ".pkl") == 0) pickles.push_back(i);
  }
  switch (random() % 7) {
    case 6: return moveIntoAStorage(members, at, random);
    case 0: {  // a namespace or class renamed everywhere
      static const char* const kNames[] = {"__torch__", "evil_code", "torch", "torch._utils", "__main__", "builtins",
                                           "collections", "torch.jit._pickle", "x", "__torch__.torch"};
      const std::string from = kNames[random() % 3 == 0 ? 1 : 0];
      const std::string to = kNames[random() % (sizeof kNames / sizeof *kNames)];
      for (auto& m : members) {
        m.data = replaced(m.data, from, to);
        m.name = replaced(m.name, from, to);
      }
      return true;
    }
    case 1: case 2: {  // an opcode deleted, doubled, moved, or one put in
      if (pickles.empty()) return false;
      std::string& p = members[pickles[random() % pickles.size()]].data;
      const auto ops = opcodesOf(p);
      if (ops.empty()) return false;
      const auto [start, end] = ops[random() % ops.size()];
      const std::string op = p.substr(start, end - start);
      const auto [at, atEnd] = ops[random() % ops.size()];
      switch (random() % 4) {
        case 0: p.erase(start, end - start); break;
        case 1: p.insert(start, op); break;
        case 2: p.erase(start, end - start); p.insert(std::min(at, p.size()), op); break;
        default: p.insert(random() % 2 ? at : atEnd, interestingOpcode(random)); break;
      }
      return true;
    }
    case 3: {  // a declared size: an int before TUPLE BINPERSID (a storage's count), or any int
      if (pickles.empty()) return false;
      std::string& p = members[pickles[random() % pickles.size()]].data;
      const auto ops = opcodesOf(p);
      std::vector<std::size_t> ints;
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const char c = p[ops[i].first];
        const bool storageCount = i + 2 < ops.size() && p[ops[i + 1].first] == 't' && p[ops[i + 2].first] == 'Q';
        if ((c == 'K' || c == 'M' || c == 'J' || c == '\x8a') && (storageCount || random() % 4 == 0)) ints.push_back(i);
      }
      if (ints.empty()) return false;
      const auto [start, end] = ops[ints[random() % ints.size()]];
      p.replace(start, end - start, forgedCount(random));
      return true;
    }
    case 4: {  // the zip: deflated, a forged declared size, dropped, or renamed in other case
      auto& m = members[random() % members.size()];
      switch (random() % 4) {
        case 0: m.deflate = !m.deflate; break;
        case 1: m.declaredSize = m.data.size() + 1 + (random() % 2 ? random() % 64 : (std::uint64_t(1) << 31)); break;
        case 2: members.erase(members.begin() + static_cast<std::ptrdiff_t>(&m - members.data())); break;
        default: std::transform(m.name.begin(), m.name.end(), m.name.begin(), [](unsigned char c) { return std::toupper(c); });
      }
      return true;
    }
    default: {  // a GLOBAL of a pickle pointed elsewhere (a class name kept, its module changed)
      if (pickles.empty()) return false;
      std::string& p = members[pickles[random() % pickles.size()]].data;
      const std::size_t global = p.find('c', random() % std::max<std::size_t>(p.size(), 1));
      const std::size_t newline = global == std::string::npos ? global : p.find('\n', global);
      if (newline == std::string::npos) return false;
      static const char* const kModules[] = {"evil_code", "torch", "__main__", "torch.distributed.rpc", "builtins"};
      p.replace(global + 1, newline - global - 1, kModules[random() % (sizeof kModules / sizeof *kModules)]);
      return true;
    }
  }
}

}  // namespace pstrain::fuzz

extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size, std::size_t maxSize,
                                               unsigned int seed) {
  std::mt19937_64 random(seed);
  auto members = pstrain::fuzz::membersOf(std::string(reinterpret_cast<const char*>(data), size));
  std::vector<std::uint64_t> at;
  if (random() % 8 != 0 && pstrain::fuzz::mutateStructure(members, at, random)) {
    const std::string packed = pstrain::testsupport::zipAt(members, at);
    if (packed.size() <= maxSize) {
      std::memcpy(data, packed.data(), packed.size());
      return packed.size();
    }
  }
  return LLVMFuzzerMutate(data, size, maxSize);
}
