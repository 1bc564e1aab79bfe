#include "runtime/zip/Pickle.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "runtime/FileLimits.h"
#include "runtime/Text.h"

namespace pstrain::zip {
namespace {

using Id = Pickled::Id;
using Kind = Pickled::Kind;

// What calling a name makes.
enum class Call {
  Value,      // nothing: the name is a value (a storage type, a dtype)
  Dict,       // collections.OrderedDict(): an empty dict
  Tensor,     // torch._utils._rebuild_tensor_v2
  QTensor,    // torch._utils._rebuild_qtensor (model files only)
  Sparse,     // torch._utils._rebuild_sparse_tensor: refused
  Parameter,  // torch._utils._rebuild_parameter(_with_state): its tensor
  Size,       // torch.Size(tuple): the tuple
  Device,     // torch.device(name): the name
  Bytes,      // _codecs.encode(text, encoding): bytes (protocol 2's bytes)
  TypeTag,    // torch.jit._pickle.restore_type_tag(value, type): the value (pstrain's checkpoints before 0.1's)
  Object,     // any other call of a model file's: an object the check follows only as a container
};

// The names a file of weights may look up, as torch.load(weights_only=True) allows them,
// exactly those that pstrain reads; nullopt for any other.
std::optional<Call> weightsGlobal(const std::string& module, const std::string& name) {
  if (module == "collections" && name == "OrderedDict") return Call::Dict;
  if (module == "torch._utils" && name == "_rebuild_tensor_v2") return Call::Tensor;
  if (module == "torch._utils" && (name == "_rebuild_parameter" || name == "_rebuild_parameter_with_state")) {
    return Call::Parameter;
  }
  if (module == "_codecs" && name == "encode") return Call::Bytes;
  if (module == "torch.jit._pickle" && name == "restore_type_tag") return Call::TypeTag;
  if (module != "torch") return std::nullopt;
  if (name == "Size") return Call::Size;
  if (name == "device") return Call::Device;
  if (elementTypeOfStorage(name) || elementTypeOfDtype(name)) return Call::Value;
  return std::nullopt;
}

// What a model file's names make when called (any name: the caller checks them).
Call modelFileGlobal(const std::string& module, const std::string& name) {
  if (module == "collections" && name == "OrderedDict") return Call::Dict;
  if (module == "torch._utils" && name == "_rebuild_tensor_v2") return Call::Tensor;
  if (module == "torch._utils" && name == "_rebuild_qtensor") return Call::QTensor;
  if (module == "torch._utils" && name == "_rebuild_sparse_tensor") return Call::Sparse;
  if (module == "torch" && elementTypeOfStorage(name)) return Call::Value;
  return Call::Object;
}

const char* kindName(Kind kind) {
  switch (kind) {
    case Kind::None: return "None";
    case Kind::Bool: return "a bool";
    case Kind::Int: return "an int";
    case Kind::Float: return "a float";
    case Kind::Text: return "a string";
    case Kind::Bytes: return "bytes";
    case Kind::Tuple: return "a tuple";
    case Kind::List: return "a list";
    case Kind::Dict: return "a dict";
    case Kind::Object: return "an object";
    case Kind::Tensor: return "a tensor";
    case Kind::Storage: return "a storage";
    case Kind::Global: return "a name";
  }
  return "a value";
}

bool isContainer(Kind kind) { return kind == Kind::Tuple || kind == Kind::List || kind == Kind::Dict || kind == Kind::Object; }

}  // namespace

class PickleReader {
 public:
  PickleReader(std::string_view pickle, PickleRules rules, const StorageCheck& storage, const Fail& fail)
      : p_(pickle),
        rules_(rules),
        storage_(storage),
        fail_(fail),
        limit_(kValueBytesPerByte * pickle.size() + kValueBytesFloor) {
    none_ = node(Kind::None);
    false_ = node(Kind::Bool);
    true_ = node(Kind::Bool);
    out_.nodes_[true_].integer = 1;
    emptyTuple_ = container(Kind::Tuple, {});
  }

  Pickled run() {
    while (pos_ < p_.size()) {
      at_ = pos_;
      const auto code = static_cast<unsigned char>(p_[pos_++]);
      if (code == '.') {
        if (above() == 0) fail("pickle stack underflow at STOP");
        if (stack_.size() != 1 || !marks_.empty()) fail(fmt::format("STOP with {} values on the stack", stack_.size()));
        out_.top_ = stack_.back();
        return std::move(out_);
      }
      step(code);
      checkMemory();
    }
    fail("the pickle has no STOP");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    fail_(fmt::format("{} (pickle byte {})", what, at_));
    throw std::logic_error("zip::Fail returned");  // fail_ must throw
  }

  // --- the pickle's bytes -----------------------------------------------------------------
  std::uint64_t fixed(int width) {
    if (p_.size() - pos_ < static_cast<std::size_t>(width)) fail("the pickle ends inside an argument");
    const std::uint64_t n = littleEndian(reinterpret_cast<const unsigned char*>(p_.data() + pos_), width);
    pos_ += static_cast<std::size_t>(width);
    return n;
  }
  std::string_view bytes(std::uint64_t n) {
    if (p_.size() - pos_ < n) fail("the pickle ends inside an argument");
    const std::string_view b = p_.substr(pos_, n);
    pos_ += n;
    return b;
  }
  std::string line() {
    const std::size_t end = p_.find('\n', pos_);
    if (end == std::string_view::npos) fail("an unterminated GLOBAL");
    std::string text(p_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return text;
  }

  // --- memory -------------------------------------------------------------------------------
  void charge(std::uint64_t bytes) { out_.valueBytes_ += bytes; }
  void checkMemory() const {
    const std::uint64_t used = out_.valueBytes_ + sizeof(Id) * (stack_.size() + memo_.size()) +
                               sizeof(std::size_t) * marks_.size();
    if (used > limit_) {
      fail(fmt::format("its values take more than {} bytes of memory, {} per byte of its {} bytes and {} beside: more "
                       "than any file of weights or model file makes (a crafted file)",
                       limit_, kValueBytesPerByte, p_.size(), kValueBytesFloor));
    }
  }

  // --- values -------------------------------------------------------------------------------
  Pickled::Node& at(Id v) { return out_.nodes_[v]; }
  Id node(Kind kind) {
    if (out_.nodes_.size() >= std::numeric_limits<Id>::max()) fail("too many values");
    out_.nodes_.emplace_back();
    out_.nodes_.back().kind = kind;
    charge(sizeof(Pickled::Node));
    return static_cast<Id>(out_.nodes_.size() - 1);
  }
  Id integer(std::int64_t n) {
    const Id v = node(Kind::Int);
    at(v).integer = n;
    return v;
  }
  Id text(Kind kind, std::string_view t) {
    const Id v = node(kind);
    at(v).index = static_cast<std::uint32_t>(out_.texts_.size());
    out_.texts_.push_back(t);
    charge(sizeof(std::string_view));
    return v;
  }
  // A container of `items`, each of which is inside it from now on.
  Id container(Kind kind, std::vector<Id> items) {
    const Id v = node(kind);
    at(v).index = static_cast<std::uint32_t>(out_.containers_.size());
    at(v).depth = 1;
    out_.containers_.emplace_back();
    charge(sizeof(std::vector<Id>));
    for (const Id item : items) add(v, item);
    return v;
  }
  // `item` into the container `c` (its next item), which must not be inside another yet.
  void add(Id c, Id item) {
    if (at(c).inside) fail(fmt::format("it changes {} that is inside another value already", kindName(at(c).kind)));
    if (item == c) fail(fmt::format("{} that holds itself", kindName(at(c).kind)));
    if (isContainer(at(item).kind)) at(item).inside = true;
    const int depth = std::max<int>(at(c).depth, at(item).depth + 1);
    if (depth > kMaxNesting) fail(fmt::format("values nested more than {} deep", kMaxNesting));
    at(c).depth = static_cast<std::uint16_t>(depth);
    out_.containers_[at(c).index].push_back(item);
    charge(2 * sizeof(Id));  // with a vector's spare capacity
  }
  const std::vector<Id>& items(Id v) const { return out_.containers_[out_.nodes_[v].index]; }
  Kind kind(Id v) const { return out_.nodes_[v].kind; }

  // --- the stack ----------------------------------------------------------------------------
  std::size_t above() const { return stack_.size() - (marks_.empty() ? 0 : marks_.back()); }
  Id pop() {
    if (above() == 0) fail("pickle stack underflow");
    const Id v = stack_.back();
    stack_.pop_back();
    return v;
  }
  Id top() {
    if (above() == 0) fail("pickle stack underflow");
    return stack_.back();
  }
  std::vector<Id> popToMark(const char* op) {
    if (marks_.empty()) fail(fmt::format("{} without a MARK", op));
    std::vector<Id> items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  void push(Id v) { stack_.push_back(v); }
  Id expect(Id v, Kind k, const char* op) {
    if (kind(v) != k) fail(fmt::format("{} on {}, not {}", op, kindName(kind(v)), kindName(k)));
    return v;
  }
  void addPairs(Id dict, const std::vector<Id>& pairs) {
    if (pairs.size() % 2) fail("an odd number of dict items");
    expect(dict, Kind::Dict, "SETITEMS");
    for (const Id item : pairs) add(dict, item);
  }

  // LONG1/LONG4: little-endian two's complement, at most 8 bytes (libtorch's limit too).
  Id longInteger(std::string_view b) {
    if (b.size() > 8) fail("an integer of more than 64 bits");
    std::uint64_t n = b.empty() ? 0 : littleEndian(reinterpret_cast<const unsigned char*>(b.data()), static_cast<int>(b.size()));
    if (!b.empty() && b.size() < 8 && (static_cast<unsigned char>(b.back()) & 0x80)) n |= ~std::uint64_t{0} << (8 * b.size());
    return integer(static_cast<std::int64_t>(n));
  }
  Id binaryFloat() {  // BINFLOAT: big-endian
    std::uint64_t bits = 0;
    for (const unsigned char c : bytes(8)) bits = bits << 8 | c;
    const Id v = node(Kind::Float);
    std::memcpy(&at(v).real, &bits, sizeof bits);
    return v;
  }

  // The opcodes that push a value of their own; false for any other.
  bool pushed(unsigned char code) {
    switch (code) {
      case ')': push(emptyTuple_); return true;
      case '}': push(container(Kind::Dict, {})); return true;
      case ']': push(container(Kind::List, {})); return true;
      case 'N': push(none_); return true;
      case 0x88: push(true_); return true;
      case 0x89: push(false_); return true;
      case 'K': push(integer(static_cast<std::int64_t>(fixed(1)))); return true;
      case 'M': push(integer(static_cast<std::int64_t>(fixed(2)))); return true;
      case 'J': push(integer(static_cast<std::int32_t>(fixed(4)))); return true;  // BININT is signed
      case 0x8a: push(longInteger(bytes(fixed(1)))); return true;
      case 0x8b: push(longInteger(bytes(fixed(4)))); return true;
      case 'G': push(binaryFloat()); return true;
      case 'U': push(text(Kind::Text, bytes(fixed(1)))); return true;
      case 'T': case 'X': push(text(Kind::Text, bytes(fixed(4)))); return true;
      case 'C': push(text(Kind::Bytes, bytes(fixed(1)))); return true;
      case 'B': push(text(Kind::Bytes, bytes(fixed(4)))); return true;
      default: return false;
    }
  }

  void step(unsigned char code) {
    if (pushed(code)) return;
    switch (code) {
      case 0x80: fixed(1); return;  // PROTO
      case '(': marks_.push_back(stack_.size()); return;
      case 'c': return push(global());
      case 'q': return memoPut(fixed(1));
      case 'r': return memoPut(fixed(4));
      case 'h': return memoGet(fixed(1));
      case 'j': return memoGet(fixed(4));
      case 0x85: case 0x86: case 0x87: {
        std::vector<Id> items(static_cast<std::size_t>(code - 0x84));
        for (auto it = items.rbegin(); it != items.rend(); ++it) *it = pop();
        return push(container(Kind::Tuple, std::move(items)));
      }
      case 't': return push(container(Kind::Tuple, popToMark("TUPLE")));
      case 'l': return push(container(Kind::List, popToMark("LIST")));
      case 'd': {
        const std::vector<Id> pairs = popToMark("DICT");
        const Id dict = container(Kind::Dict, {});
        addPairs(dict, pairs);
        return push(dict);
      }
      case 'a': {
        const Id item = pop();
        return add(expect(top(), Kind::List, "APPEND"), item);
      }
      case 'e': {
        const std::vector<Id> items = popToMark("APPENDS");
        const Id list = expect(top(), Kind::List, "APPENDS");
        for (const Id item : items) add(list, item);
        return;
      }
      case 's': {
        const Id value = pop(), key = pop();
        return addPairs(top(), {key, value});
      }
      case 'u': {
        const std::vector<Id> pairs = popToMark("SETITEMS");
        return addPairs(top(), pairs);
      }
      case 'R': {
        const Id args = pop(), callable = pop();
        return push(call(callable, args));
      }
      case 0x81: {  // NEWOBJ: an object of a model file's class
        if (rules_ != PickleRules::ModelFile) fail("opcode 0x81 (NEWOBJ), which a file of weights does not hold");
        const Id args = pop(), cls = pop();
        if (kind(cls) != Kind::Global) fail("NEWOBJ of something that is not a class");
        return push(object(cls, args));
      }
      case 'b': return build(pop());
      case 'Q': return push(storage(pop()));
      case '0': pop(); return;
      default: fail(fmt::format("opcode 0x{:02x}, which a pickle of torch's does not hold", code));
    }
  }

  void memoPut(std::uint64_t id) {
    // libtorch appends whatever id is given: only ids in order mean the same to both readers.
    if (id != memo_.size()) fail(fmt::format("memo id {} out of order", id));
    memo_.push_back(top());
  }
  void memoGet(std::uint64_t id) {
    if (id >= memo_.size()) fail(fmt::format("memo id {} read before it is set", id));
    push(memo_[id]);
  }

  Id global() {
    std::string module = line(), name = line();
    Call call = Call::Object;
    if (rules_ == PickleRules::Weights) {
      const auto allowed = weightsGlobal(module, name);
      if (!allowed) {
        fail(fmt::format("it names {}.{}, which a file of weights does not: pstrain reads what torch.load(weights_only="
                         "True) reads (tensors, numbers, strings, lists, dicts) and runs none of a pickle's code",
                         printable(module), printable(name)));
      }
      call = *allowed;
    } else {
      call = modelFileGlobal(module, name);
    }
    const Id v = node(Kind::Global);
    at(v).integer = static_cast<std::int64_t>(out_.globals_.size());
    out_.globals_.push_back({std::move(module), std::move(name)});
    calls_.push_back(call);
    charge(sizeof(PickleGlobal) + sizeof(Call));
    return v;
  }

  Id object(Id cls, Id args) {
    const Id v = container(Kind::Object, {args});
    at(v).integer = at(cls).integer;
    return v;
  }

  // BUILD: `state` given to the object below it. A dict's state (OrderedDict's _metadata) and
  // a tensor's are dropped; an object of a model file keeps it.
  void build(Id state) {
    const Id target = top();
    if (kind(target) == Kind::Object) return add(target, state);
    if (kind(target) != Kind::Dict && kind(target) != Kind::Tensor) {
      fail(fmt::format("BUILD of {}, which is not an object, a dict or a tensor", kindName(kind(target))));
    }
  }

  Id call(Id callable, Id args) {
    if (kind(callable) != Kind::Global) fail("REDUCE of something that cannot be called");
    const PickleGlobal& g = out_.globals_[static_cast<std::size_t>(at(callable).integer)];
    if (kind(args) != Kind::Tuple) fail(fmt::format("{} called with arguments that are not a tuple", printable(g.qualified())));
    const std::vector<Id> a = items(args);
    switch (calls_[static_cast<std::size_t>(at(callable).integer)]) {
      case Call::Dict: return container(Kind::Dict, {});  // its items come by SETITEMS
      case Call::Tensor: case Call::QTensor: return tensor(a);
      case Call::Sparse: fail("a sparse tensor (pstrain reads dense tensors only)");
      case Call::Parameter:
        if (a.empty() || kind(a[0]) != Kind::Tensor) fail("a parameter that is not a tensor");
        return a[0];
      case Call::Size:
        if (a.size() != 1) fail("torch.Size of other than one tuple");
        counts(a[0], "torch.Size's sizes");
        return a[0];
      case Call::Device:
        if (a.empty() || kind(a[0]) != Kind::Text) fail("torch.device of other than a name");
        return a[0];
      case Call::Bytes:
        if (a.empty() || kind(a[0]) != Kind::Text) fail("_codecs.encode of other than a string");
        return text(Kind::Bytes, out_.text(a[0]));
      case Call::TypeTag:
        if (a.size() != 2 || kind(a[1]) != Kind::Text) fail("restore_type_tag of other than a value and a type");
        return a[0];
      case Call::Object: return object(callable, args);
      case Call::Value: break;
    }
    fail(fmt::format("it calls {}, which is not a function", printable(g.qualified())));
  }

  std::vector<std::int64_t> counts(Id v, const char* what) {
    if (kind(v) != Kind::Tuple) fail(fmt::format("{} are not a tuple", what));
    std::vector<std::int64_t> out;
    for (const Id item : items(v)) {
      if (kind(item) != Kind::Int || at(item).integer < 0) fail(fmt::format("{} are not counts", what));
      out.push_back(at(item).integer);
    }
    return out;
  }

  // A persistent id as libtorch's unpickler takes it: ("storage", torch.<Type>Storage, key,
  // device, elements), which it sizes at elements x the type's size whatever its record holds.
  Id storage(Id id) {
    const auto bad = [&](const std::string& what) { fail(fmt::format("a persistent id {}", what)); };
    if (kind(id) != Kind::Tuple || items(id).size() != 5) bad("that is not a storage's (\"storage\", type, key, device, size)");
    const std::vector<Id> part = items(id);
    if (kind(part[0]) != Kind::Text || out_.text(part[0]) != "storage") bad("that is not a storage's");
    const PickleGlobal* type = kind(part[1]) == Kind::Global ? &out_.globals_[static_cast<std::size_t>(at(part[1]).integer)] : nullptr;
    const ElementType* element = type && type->module == "torch" ? elementTypeOfStorage(type->name) : nullptr;
    if (!element) bad("whose type is not one of torch's storage types");
    if (kind(part[2]) != Kind::Text || kind(part[3]) != Kind::Text) bad("whose key or device is not a string");
    if (kind(part[4]) != Kind::Int || at(part[4]).integer < 0 ||
        static_cast<std::uint64_t>(at(part[4]).integer) > kMaxElements) {
      bad("whose size is not a count of elements");
    }
    PickledTensor s;
    s.type = element;
    s.key = std::string(out_.text(part[2]));
    s.storageElements = static_cast<std::uint64_t>(at(part[4]).integer);
    if (storage_ && s.storageElements > 0) {
      storage_(s.key, *element, s.storageElements);  // libtorch reads no record for an empty one
    }
    return tensorNode(Kind::Storage, std::move(s));
  }

  Id tensorNode(Kind k, PickledTensor t) {
    const Id v = node(k);
    at(v).index = static_cast<std::uint32_t>(out_.tensors_.size());
    charge(sizeof(PickledTensor) + t.key.size() + 2 * sizeof(std::int64_t) * t.sizes.size());
    out_.tensors_.push_back(std::move(t));
    return v;
  }

  // _rebuild_tensor_v2(storage, offset, sizes, strides, ...) and _rebuild_qtensor's: a view
  // within its storage, of a count of elements that does not overflow.
  Id tensor(const std::vector<Id>& a) {
    const auto bad = [&](const std::string& what) { fail(fmt::format("a tensor {}", what)); };
    if (a.size() < 4 || kind(a[0]) != Kind::Storage) bad("not rebuilt from (storage, offset, sizes, strides, ...)");
    if (kind(a[1]) != Kind::Int || at(a[1]).integer < 0) bad("whose offset is not a count of elements");
    PickledTensor t = out_.tensors_[at(a[0]).index];
    t.offset = at(a[1]).integer;
    t.sizes = counts(a[2], "a tensor's sizes");
    t.strides = counts(a[3], "a tensor's strides");
    if (t.sizes.size() != t.strides.size()) bad("with other than as many sizes as strides");
    if (!elementCount(t.sizes)) bad(fmt::format("of sizes [{}]: more than 2^62 elements", fmt::join(t.sizes, ", ")));
    if (!viewWithin(t.offset, t.sizes, t.strides, t.storageElements)) {
      bad(fmt::format("that reaches past its storage of {} elements (sizes [{}], strides [{}], offset {})",
                      t.storageElements, fmt::join(t.sizes, ", "), fmt::join(t.strides, ", "), t.offset));
    }
    return tensorNode(Kind::Tensor, std::move(t));
  }

  std::string_view p_;
  PickleRules rules_;
  const StorageCheck& storage_;
  const Fail& fail_;
  const std::uint64_t limit_;
  std::size_t pos_ = 0, at_ = 0;
  Pickled out_;
  std::vector<Id> stack_, memo_;
  std::vector<std::size_t> marks_;  // stack sizes at each open MARK
  std::vector<Call> calls_;         // by global
  Id none_ = 0, false_ = 0, true_ = 0, emptyTuple_ = 0;
};

std::optional<Pickled::Id> Pickled::find(Id dict, std::string_view key, const Fail& fail) const {
  std::optional<Id> found;
  const std::vector<Id>& pairs = items(dict);
  for (std::size_t i = 0; i + 1 < pairs.size(); i += 2) {
    if (kind(pairs[i]) != Kind::Text || text(pairs[i]) != key) continue;
    if (found) {
      fail(fmt::format("a dict that sets '{}' twice", printable(std::string(key))));
      throw std::logic_error("zip::Fail returned");
    }
    found = pairs[i + 1];
  }
  return found;
}

Pickled readPickle(std::string_view pickle, PickleRules rules, const StorageCheck& storage, const Fail& fail) {
  return PickleReader(pickle, rules, storage, fail).run();
}

}  // namespace pstrain::zip
