#pragma once
// The one pickle reader for files that someone else wrote: torch.save's archives (state
// dicts, nanoGPT's ckpt.pt, pstrain's own checkpoints) and torch.jit.save's (a model file's
// data.pkl and constants.pkl, read here before libtorch's own unpickler reads them).
// Torch-free. It makes the values a pickle makes (protocol 2, the opcodes torch's writers
// use) and runs none of its code; a tensor is where its elements are (its storage, offset,
// sizes, strides): the caller makes it. It refuses, calling `fail` (which must throw) with
// what is wrong and at which byte:
//   - an opcode outside that set, an argument past the pickle's end, a pop below the
//     innermost MARK, memo ids out of order (libtorch appends whatever id is given: only ids
//     in order mean the same to both readers) or read before they are set;
//   - values nested deeper than kMaxNesting (FileLimits.h), and a container changed once it
//     is inside another (no pickler writes that for values without cycles; allowing it
//     would let a value's depth grow unseen, or make a cycle);
//   - more memory for its values than kValueBytesPerByte per byte of the pickle (plus
//     kValueBytesFloor): what a pickle makes is bounded by its size;
//   - a persistent id that is not a storage of torch's types ("storage", torch.<Type>Storage,
//     key, device, elements), and, through `storage`, one whose record does not hold exactly
//     its elements;
//   - a tensor (torch._utils._rebuild_tensor_v2, _rebuild_qtensor) whose elements overflow
//     (FileLimits.h: elementCount) or whose view reaches past its storage (viewWithin);
//     sparse tensors (their indices are not checked);
//   - under PickleRules::Weights, any name that torch.load(weights_only=True) would not look
//     up (exactly those pstrain reads: WeightsGlobal), or a call of one that is a value.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/zip/ElementTypes.h"
#include "runtime/zip/ZipDirectory.h"

namespace pstrain::zip {

// What a pickle may name and make.
enum class PickleRules {
  Weights,    // torch.load(weights_only=True)'s: dicts, lists, tuples, numbers, strings, tensors
  ModelFile,  // torch.jit.save's: any name (the caller checks them: globals()), objects of classes
};

// A name that a pickle's GLOBAL opcode looks up: module "torch._utils", name
// "_rebuild_tensor_v2"; module "__torch__.model", name "Net" (a TorchScript class).
struct PickleGlobal {
  std::string module, name;
  std::string qualified() const { return module + "." + name; }
};

// A tensor as its pickle gives it: a view of a storage.
struct PickledTensor {
  const ElementType* type = nullptr;  // its storage's
  std::string key;                    // its storage's record: <root>/data/<key>
  std::int64_t offset = 0;            // in elements
  std::vector<std::int64_t> sizes, strides;
  std::uint64_t storageElements = 0;  // of its storage
};

// Memory a pickle's values may take, per byte of it and beside: a state dict's pickle makes
// about 10 bytes of values per byte (unit.WeightsFile prints the measured figure), a crafted
// one of empty lists 50.
constexpr std::uint64_t kValueBytesPerByte = 24;
constexpr std::uint64_t kValueBytesFloor = std::uint64_t(4) << 20;

// The values one pickle made. A value is an Id; containers hold Ids.
class Pickled {
 public:
  using Id = std::uint32_t;
  enum class Kind : std::uint8_t { None, Bool, Int, Float, Text, Bytes, Tuple, List, Dict, Object, Tensor, Storage, Global };

  Id top() const { return top_; }
  Kind kind(Id v) const { return nodes_[v].kind; }
  std::int64_t integer(Id v) const { return nodes_[v].integer; }  // Bool (0, 1), Int
  double real(Id v) const { return nodes_[v].real; }              // Float
  std::string_view text(Id v) const { return texts_[nodes_[v].index]; }  // Text, Bytes
  // Tuple and List: the items; Dict: keys and values alternating, in order; Object: what made
  // it (its args), then each state a BUILD gave it.
  const std::vector<Id>& items(Id v) const { return containers_[nodes_[v].index]; }
  const PickledTensor& tensor(Id v) const { return tensors_[nodes_[v].index]; }  // Tensor
  // Global: the name; Object: its class (what made it).
  const PickleGlobal& global(Id v) const { return globals_[static_cast<std::size_t>(nodes_[v].integer)]; }
  // The value `dict` holds under the text `key`, or nullopt; refuses (`fail`) a key it sets twice.
  std::optional<Id> find(Id dict, std::string_view key, const Fail& fail) const;

  // Every name the pickle looks up, in order.
  const std::vector<PickleGlobal>& globals() const { return globals_; }
  // Bytes its values took (kValueBytesPerByte's measure).
  std::uint64_t valueBytes() const { return valueBytes_; }

 private:
  friend class PickleReader;
  struct Node {
    Kind kind = Kind::None;
    bool inside = false;     // a container's: placed in another, it may no longer change
    std::uint16_t depth = 0; // 0: holds nothing
    std::uint32_t index = 0; // into texts_, containers_, tensors_, globals_
    union {
      std::int64_t integer = 0;
      double real;
    };
  };
  std::vector<Node> nodes_;
  std::vector<std::string_view> texts_;  // views of the pickle
  std::vector<std::vector<Id>> containers_;
  std::vector<PickledTensor> tensors_;
  std::vector<PickleGlobal> globals_;
  std::uint64_t valueBytes_ = 0;
  Id top_ = 0;
};

// The record of a storage the pickle names by `key`, of `elements` elements of `type`:
// throws (through the reader's `fail`: its argument says why) unless a record holds exactly
// them. Null: no records to check (a pickle read on its own).
using StorageCheck = std::function<void(const std::string& key, const ElementType& type, std::uint64_t elements)>;

// The values of `pickle` (a view that must outlive the result: texts are views of it).
Pickled readPickle(std::string_view pickle, PickleRules rules, const StorageCheck& storage, const Fail& fail);

}  // namespace pstrain::zip
