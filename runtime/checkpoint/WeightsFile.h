#pragma once
// Files of weights, read and written in one place: what comes from elsewhere (pstrain
// --init-from, pseval --model's checks), what pstrain's own checkpoints hold, and what goes
// elsewhere (trained_model.pt, pseval --export). Storage only: the tensors by the names the
// file gives them; which of a model's tensors a name is (prefixes, ties, adapters) is
// models/StateDict.h's business, as torch.distributed.checkpoint keeps its storage readers
// apart from its load planner.
//
// Read by pstrain's own checks only, never by libtorch's unpickler: torch.save's archives
// through zip::checkArchive and zip::readPickle (which make what torch.load(weights_only=
// True) makes and run no pickle code), safetensors by its spec (Safetensors.h). Opening a
// file reads and checks its structure only (the zip directory and the pickle, or the
// safetensors header, and the hub's index); a tensor's bytes are read when it is asked for,
// straight into the tensor that will hold them, so that a rank never holds a copy of the file
// and reads only the tensors it needs.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/zip/ElementTypes.h"
#include "runtime/zip/Pickle.h"

namespace pstrain::checkpoint {

// One tensor of a file, before its bytes are read.
struct StoredTensor {
  std::string name;                         // as the file names it
  const zip::ElementType* type = nullptr;   // of its elements (ElementType::weights)
  std::vector<std::int64_t> sizes;
  // Where its elements are: in the reader's file `file`, a storage of `storageElements`
  // elements from byte `storage`, viewed at `offset` (elements) with `strides`.
  std::size_t file = 0;
  std::uint64_t storage = 0, storageElements = 0;
  std::int64_t offset = 0;
  std::vector<std::int64_t> strides;

  std::int64_t numel() const;
  // Whether its elements lie back to back from its first (a contiguous view).
  bool contiguous() const;
};

// A file of weights open for reading: torch.save's archive (a state dict, or a dict that
// holds one under "model" or "state_dict": nanoGPT's ckpt.pt, Lightning's checkpoints,
// pstrain's own), a safetensors file, or the hub's shards of safetensors files with their
// index (model.safetensors.index.json, or the folder that holds it, or one
// model.safetensors, or pytorch_model.bin). Throws ConfigError naming the file and what is
// wrong with it when it is opened: nothing of a file that is refused is used.
class WeightsReader {
 public:
  explicit WeightsReader(const std::string& path);
  // Bytes in memory, named `path` in messages (a checkpoint read whole to check its CRC; the
  // fuzzers); they must outlive the reader.
  WeightsReader(std::string_view bytes, const std::string& path);
  WeightsReader(WeightsReader&&) noexcept;
  WeightsReader& operator=(WeightsReader&&) noexcept;
  ~WeightsReader();

  const std::string& path() const;
  // The state dict's tensors, in the file's order (the index's shards in turn).
  const std::vector<StoredTensor>& tensors() const;
  // Reads `t` into `into` (its shape, on the CPU; another dtype converts), a piece
  // at a time; `crc` (unless null) goes on over the bytes read. A view with gaps reads the
  // span of its storage it covers.
  void read(const StoredTensor& t, at::Tensor& into, std::uint32_t* crc = nullptr) const;
  // `t` as a contiguous CPU tensor of its own type, made once for each place it views: names
  // of one view of one storage (a tie, as torch.save writes it) are one tensor, as torch.load
  // makes them. ConfigError once the tensors made add up to more than 4 times the files'
  // bytes (a crafted pickle that views one storage over and over, each time otherwise).
  at::Tensor read(const StoredTensor& t) const;
  // Every tensor, read (readWeights's).
  TensorList readAll() const;

  // The CRC-32 of its structure (the index, each file's header or pickle and the CRC-32 its
  // zip directory records of each of its records), and the bytes of its files.
  std::uint32_t structureCrc() const;
  std::uint64_t bytes() const;

  // torch.save's archive: its data.pkl's values (pstrain's checkpoints read their __meta__
  // and optimizer state so), and any tensor of them as a StoredTensor named `name`. Null and
  // InternalError for safetensors.
  const zip::Pickled* pickled() const;
  StoredTensor stored(zip::Pickled::Id tensor, const std::string& name) const;
  // The tensors of the pickle's dict `dict` (text keys, tensor values), by their keys.
  // ConfigError, naming `what` ("its state dict"), for a key that is not a string, a value
  // that is not a tensor or a name set twice.
  std::vector<StoredTensor> tensorsOf(zip::Pickled::Id dict, const std::string& what) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Every tensor of `bytes` as a file of weights (the fuzzers' entry), `path` naming them in
// messages.
TensorList readWeights(std::string_view bytes, const std::string& path);

// The libtorch type of an element type's row (zip/ElementTypes.h); InternalError for one
// that libtorch lacks.
at::ScalarType scalarTypeOf(const zip::ElementType& type);
// The row of `type`; null for one that no file of weights holds.
const zip::ElementType* elementTypeOf(at::ScalarType type);

// Writes `tensors` to `path` atomically: for a path ending in .safetensors by its spec, each
// tensor once, every further name of a tensor (a tie: `ties`' aliases, as the checkpoint
// records them; without them, a name whose tensor is one written already) in __metadata__ as
// "NAME": "NAME WRITTEN" (as Hugging Face's writer leaves a tie's copy out), "format": "pt"
// first; else as torch.save's state dict (writeStateDict: a tie's names sharing one
// storage). Float, half, bfloat16, integer and bool tensors. Throws CheckpointError on a
// failed write.
void writeWeightsFile(const std::string& path, const TensorList& tensors, const Ties& ties = {});

}  // namespace pstrain::checkpoint
