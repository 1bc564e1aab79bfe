#pragma once
// The objects of a torch.save pickle of weights (a state dict, nanoGPT's ckpt.pt, pstrain's
// own checkpoints), made as torch.load(weights_only=True) makes them and by no other code:
// None, bools, numbers, strings, bytes, tuples, lists, dicts (OrderedDict's too, its
// _metadata dropped) and tensors (torch._utils._rebuild_tensor_v2 and _rebuild_parameter over
// the archive's storages), torch.Size as a tuple, torch.device as its name's text, dtypes
// as names.
// Any other name the pickle looks up is refused, naming it: a pickle that would call
// os.system, or build an object of a class of the user's, never gets that far. Torch-free:
// a tensor is where its elements are (its storage's record, offset, sizes, strides); the
// caller makes it. For an archive that zip::checkArchive passed: storages and views are
// within the file; each value's kind is checked here.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/zip/ZipDirectory.h"

namespace pstrain::zip {

struct PickledTensor {
  std::string storageType;  // "FloatStorage", "BFloat16Storage" ...
  std::string key;          // its record: <root>/data/<key>
  std::int64_t offset = 0;  // in elements
  std::vector<std::int64_t> sizes, strides;
};

struct PickleValue {
  // Storage: a storage, before a tensor views it (`tensor` without its view).
  enum class Kind { None, Bool, Int, Float, Text, Bytes, Tuple, List, Dict, Tensor, Storage, Name };
  Kind kind = Kind::None;
  std::int64_t integer = 0;  // Bool, Int; Name: which of the pickle's names (the reader's own)
  double real = 0;           // Float
  std::string text;          // Text, Bytes; Name: "torch.float32"
  // Tuple and List: the items; Dict: keys and values, alternating, in order.
  std::vector<std::shared_ptr<PickleValue>> items;
  PickledTensor tensor;
};

// The object that `pickle` (the archive's data.pkl) makes; calls `fail` (which must throw)
// with what is wrong at the first problem.
std::shared_ptr<PickleValue> readWeightsPickle(std::string_view pickle, const Fail& fail);

}  // namespace pstrain::zip
