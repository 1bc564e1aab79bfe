#include "runtime/zip/WeightsPickle.h"

#include <fmt/format.h>

#include <cstring>
#include <optional>
#include <utility>

#include "runtime/Text.h"

namespace pstrain::zip {
namespace {

using Item = std::shared_ptr<PickleValue>;
using Kind = PickleValue::Kind;

Item make(Kind kind) {
  auto v = std::make_shared<PickleValue>();
  v->kind = kind;
  return v;
}

// A name the pickle looks up (GLOBAL), as far as weights go: what calling it makes.
enum class Callable { None, Dict, Tensor, Parameter, Size, Device, Bytes };

struct Global {
  std::string module, name;
  Callable callable = Callable::None;  // None: a value in itself (a storage type, a dtype)
};

// What torch.load(weights_only=True) takes of the names a torch.save pickle of weights
// looks up; nullopt for any other.
std::optional<Callable> allowed(const std::string& module, const std::string& name) {
  if (module == "collections" && name == "OrderedDict") return Callable::Dict;
  if (module == "torch._utils" && name == "_rebuild_tensor_v2") return Callable::Tensor;
  if (module == "torch._utils" && (name == "_rebuild_parameter" || name == "_rebuild_parameter_with_state")) {
    return Callable::Parameter;
  }
  if (module == "torch" && name == "Size") return Callable::Size;
  if (module == "torch" && name == "device") return Callable::Device;
  if (module == "_codecs" && name == "encode") return Callable::Bytes;  // bytes, in protocol 2
  if (module == "torch" && (endsWith(name, "Storage") || name.find("float") != std::string::npos ||
                            name.find("int") != std::string::npos || name == "bool")) {
    return Callable::None;  // storage types and dtypes: names
  }
  return std::nullopt;
}

class WeightsPickle {
 public:
  WeightsPickle(std::string_view pickle, const Fail& fail) : p_(pickle), fail_(fail) {}

  Item run() {
    while (pos_ < p_.size()) {
      at_ = pos_;
      const unsigned char code = static_cast<unsigned char>(p_[pos_++]);
      if (code == '.') {
        if (stack_.size() != 1 || !marks_.empty()) fail("STOP with other than one object on the stack");
        return stack_.back();
      }
      step(code);
    }
    fail("no STOP");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    fail_(fmt::format("pickle byte {}: {}", at_, what));
    throw std::logic_error("zip::Fail returned");  // fail_ must throw
  }

  std::uint64_t fixed(int width) {
    if (p_.size() - pos_ < static_cast<std::size_t>(width)) fail("ends inside an argument");
    const std::uint64_t n = littleEndian(reinterpret_cast<const unsigned char*>(p_.data() + pos_), width);
    pos_ += static_cast<std::size_t>(width);
    return n;
  }
  std::string_view bytes(std::uint64_t n) {
    if (p_.size() - pos_ < n) fail("ends inside an argument");
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

  std::size_t above() const { return stack_.size() - (marks_.empty() ? 0 : marks_.back()); }
  Item pop() {
    if (above() == 0) fail("the stack is empty");
    Item v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  std::vector<Item> popToMark() {
    if (marks_.empty()) fail("no MARK");
    std::vector<Item> items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  Item& top() {
    if (above() == 0) fail("the stack is empty");
    return stack_.back();
  }
  void push(Item v) { stack_.push_back(std::move(v)); }
  Item integer(std::int64_t n) {
    Item v = make(Kind::Int);
    v->integer = n;
    return v;
  }
  Item text(Kind kind, std::string_view b) {
    Item v = make(kind);
    v->text = std::string(b);
    return v;
  }
  Item tuple(std::vector<Item> items) {
    Item v = make(Kind::Tuple);
    v->items = std::move(items);
    return v;
  }
  // LONG1/LONG4: little-endian two's complement, at most 8 bytes.
  Item longInteger(std::string_view b) {
    if (b.size() > 8) fail("an integer of more than 64 bits");
    std::uint64_t n = b.empty() ? 0 : littleEndian(reinterpret_cast<const unsigned char*>(b.data()), static_cast<int>(b.size()));
    if (!b.empty() && b.size() < 8 && (static_cast<unsigned char>(b.back()) & 0x80)) n |= ~std::uint64_t{0} << (8 * b.size());
    return integer(static_cast<std::int64_t>(n));
  }
  void memoPut(std::uint64_t id) {
    if (id != memo_.size()) fail(fmt::format("memo id {} out of order", id));
    memo_.push_back(top());
  }
  void memoGet(std::uint64_t id) {
    if (id >= memo_.size()) fail(fmt::format("memo id {} read before it is set", id));
    push(memo_[id]);
  }
  Item& expect(Item& v, Kind kind, const char* what) {
    if (v->kind != kind) fail(fmt::format("{} on something else", what));
    return v;
  }
  void setItems(Item& dict, std::vector<Item> items) {
    if (items.size() % 2) fail("an odd number of dict items");
    expect(dict, Kind::Dict, "SETITEMS");
    for (Item& item : items) dict->items.push_back(std::move(item));
  }

  // The opcodes that push a value of their own (an empty container, a number, a string);
  // false for any other.
  bool pushed(unsigned char code) {
    switch (code) {
      case ')': push(tuple({})); return true;
      case '}': push(make(Kind::Dict)); return true;
      case ']': push(make(Kind::List)); return true;
      case 'N': push(make(Kind::None)); return true;
      case 0x88: case 0x89: {
        Item v = make(Kind::Bool);
        v->integer = code == 0x88;
        push(v);
        return true;
      }
      case 'K': push(integer(static_cast<std::int64_t>(fixed(1)))); return true;
      case 'M': push(integer(static_cast<std::int64_t>(fixed(2)))); return true;
      case 'J': push(integer(static_cast<std::int32_t>(fixed(4)))); return true;
      case 0x8a: push(longInteger(bytes(fixed(1)))); return true;
      case 0x8b: push(longInteger(bytes(fixed(4)))); return true;
      case 'G': {  // BINFLOAT: big-endian
        std::uint64_t bits = 0;
        for (unsigned char c : bytes(8)) bits = bits << 8 | c;
        Item v = make(Kind::Float);
        std::memcpy(&v->real, &bits, sizeof bits);
        push(v);
        return true;
      }
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
      case 'c': return global();
      case 'q': return memoPut(fixed(1));
      case 'r': return memoPut(fixed(4));
      case 'h': return memoGet(fixed(1));
      case 'j': return memoGet(fixed(4));
      case 0x85: case 0x86: case 0x87: {
        std::vector<Item> items(static_cast<std::size_t>(code - 0x84));
        for (auto it = items.rbegin(); it != items.rend(); ++it) *it = pop();
        return push(tuple(std::move(items)));
      }
      case 't': return push(tuple(popToMark()));
      case 'l': {
        Item v = make(Kind::List);
        v->items = popToMark();
        return push(v);
      }
      case 'd': {
        Item v = make(Kind::Dict);
        setItems(v, popToMark());
        return push(v);
      }
      case 'a': {
        Item item = pop();
        expect(top(), Kind::List, "APPEND")->items.push_back(std::move(item));
        return;
      }
      case 'e': {
        std::vector<Item> items = popToMark();
        Item& list = expect(top(), Kind::List, "APPENDS");
        for (Item& item : items) list->items.push_back(std::move(item));
        return;
      }
      case 's': {
        Item value = pop(), key = pop();
        setItems(top(), {std::move(key), std::move(value)});
        return;
      }
      case 'u': {
        std::vector<Item> items = popToMark();
        setItems(top(), std::move(items));
        return;
      }
      case 'R': {
        Item args = pop(), callable = pop();
        return push(call(callable, args));
      }
      case 'b': {  // BUILD: an OrderedDict's state (its _metadata) is dropped, a tensor's too
        pop();
        const Kind kind = top()->kind;
        if (kind != Kind::Dict && kind != Kind::Tensor) fail("BUILD of an object that is not a dict or a tensor");
        return;
      }
      case 'Q': return push(storage(pop()));
      case '0': pop(); return;
      default: fail(fmt::format("opcode 0x{:02x}, which a pickle of weights does not hold", code));
    }
  }

  void global() {
    const std::string module = line(), name = line();
    const auto callable = allowed(module, name);
    if (!callable) {
      fail(fmt::format("it names {}.{}, which a file of weights does not: pstrain reads what torch.load(weights_only="
                       "True) reads (tensors, numbers, strings, lists, dicts) and runs none of a pickle's code",
                       printable(module), printable(name)));
    }
    globals_.push_back({module, name, *callable});
    Item v = text(Kind::Name, module + "." + name);
    v->integer = static_cast<std::int64_t>(globals_.size() - 1);  // which global
    push(v);
  }

  // A storage's persistent id: ("storage", torch.<Type>Storage, key, device, elements).
  Item storage(const Item& id) {
    if (id->kind != Kind::Tuple || id->items.size() != 5 || id->items[0]->kind != Kind::Text ||
        id->items[0]->text != "storage" || id->items[1]->kind != Kind::Name || id->items[2]->kind != Kind::Text) {
      fail("a persistent id that is not a storage's");
    }
    Item v = make(Kind::Storage);
    v->tensor.storageType = globals_[static_cast<std::size_t>(id->items[1]->integer)].name;
    v->tensor.key = id->items[2]->text;
    return v;
  }

  std::vector<std::int64_t> counts(const Item& v, const char* what) {
    if (v->kind != Kind::Tuple) fail(fmt::format("a tensor whose {} are not a tuple", what));
    std::vector<std::int64_t> out;
    for (const Item& item : v->items) {
      if (item->kind != Kind::Int || item->integer < 0) fail(fmt::format("a tensor whose {} are not counts", what));
      out.push_back(item->integer);
    }
    return out;
  }

  Item call(const Item& callable, const Item& args) {
    if (callable->kind != Kind::Name) fail("REDUCE of something that cannot be called");
    const Global& g = globals_[static_cast<std::size_t>(callable->integer)];
    if (args->kind != Kind::Tuple) fail(fmt::format("{}.{} called with arguments that are not a tuple", g.module, g.name));
    const std::vector<Item>& a = args->items;
    switch (g.callable) {
      case Callable::Dict: return make(Kind::Dict);  // OrderedDict(): its items come by SETITEMS
      case Callable::Tensor: {
        if (a.size() < 4 || a[0]->kind != Kind::Storage || a[1]->kind != Kind::Int) {
          fail("_rebuild_tensor_v2 not of (storage, offset, sizes, strides, ...)");
        }
        Item v = make(Kind::Tensor);
        v->tensor = a[0]->tensor;
        v->tensor.offset = a[1]->integer;
        v->tensor.sizes = counts(a[2], "sizes");
        v->tensor.strides = counts(a[3], "strides");
        if (v->tensor.sizes.size() != v->tensor.strides.size()) fail("a tensor with as many sizes as strides");
        return v;
      }
      case Callable::Parameter:
        if (a.empty() || a[0]->kind != Kind::Tensor) fail("a parameter that is not a tensor");
        return a[0];
      case Callable::Size: {
        if (a.size() != 1) fail("torch.Size of other than one tuple");
        counts(a[0], "sizes");
        return a[0];
      }
      case Callable::Device:
        if (a.empty() || a[0]->kind != Kind::Text) fail("torch.device of other than a name");
        return text(Kind::Text, a[0]->text);  // the device's name
      case Callable::Bytes:
        if (a.empty() || a[0]->kind != Kind::Text) fail("_codecs.encode of other than a string");
        return text(Kind::Bytes, a[0]->text);
      case Callable::None: break;
    }
    fail(fmt::format("it calls {}.{}, which is not a function", g.module, g.name));
  }

  std::string_view p_;
  const Fail& fail_;
  std::size_t pos_ = 0, at_ = 0;
  std::vector<Item> stack_;
  std::vector<std::size_t> marks_;
  std::vector<Item> memo_;
  std::vector<Global> globals_;
};

}  // namespace

std::shared_ptr<PickleValue> readWeightsPickle(std::string_view pickle, const Fail& fail) {
  return WeightsPickle(pickle, fail).run();
}

}  // namespace pstrain::zip
