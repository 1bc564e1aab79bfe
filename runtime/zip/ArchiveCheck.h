#pragma once
// A structural check of a PyTorch archive (torch.save, torch.jit.save, pstrain's own
// checkpoints) before libtorch reads anything of it. Torch-free.
//
// libtorch's reader trusts what an archive declares: a zip record may claim more bytes than
// the file has; a storage's element count (its persistent id) sizes the tensor's storage
// whatever the record holds, so a count past the record's bytes reads past them (SIGSEGV,
// or garbage evaluated silently); the unpickler grows its memo table to any id the pickle
// names and allocates any string length it reads, and pops items without checking that
// they are there. This check bounds all of that by the file's own bytes:
//   - every record lies within the file, no two names equal letter case aside (libtorch
//     looks names up that way, and as C strings: no NUL in a name), none marked a
//     directory or declaring bytes it does not
//     hold (libtorch's miniz would extract nothing of them: the loader would read
//     uninitialized memory); stored uncompressed, as PyTorch writes them, except a model
//     file's code (torch.jit.save deflates it), each such record at most kMaxInflated bytes
//     inflated and all of them kMaxInflatedTotal (a zip bomb cannot make every rank
//     allocate gigabytes);
//   - each pickle is made of the protocol-2 opcodes libtorch reads (one row each in
//     ArchiveCheck.cpp), their lengths within the pickle, memo ids assigned in order, no
//     opcode taking more items than there are above its innermost MARK;
//   - each persistent id is a storage ("storage", torch.<Type>Storage, key, device, count)
//     whose count times its element size is exactly the size of its record;
//   - each tensor that a pickle rebuilds (torch._utils._rebuild_tensor_v2, _rebuild_qtensor)
//     is a view within its storage: its offset, sizes and strides literal non-negative
//     integers whose last element lies before the storage's end (libtorch makes the view
//     whatever it says, and every later read of it would go out of bounds); sparse tensors,
//     whose indices no check follows, are refused.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/zip/ZipDirectory.h"

namespace pstrain::zip {

// A name that a pickle's GLOBAL opcode looks up: module "torch._utils", name
// "_rebuild_tensor_v2"; module "__torch__.model", name "Net" (a TorchScript class).
struct PickleGlobal {
  std::string module, name;
  std::string qualified() const { return module + "." + name; }
};

// What the archive is: a checkpoint (torch.save's form: data.pkl, no objects, every record
// stored) or a model file (torch.jit.save's: data.pkl and constants.pkl, whose pickles make
// objects of its TorchScript classes, and deflated code).
enum class ArchiveKind { Checkpoint, ModelFile };

constexpr std::uint64_t kMaxInflated = std::uint64_t(64) << 20;
constexpr std::uint64_t kMaxInflatedTotal = std::uint64_t(256) << 20;

struct ArchiveContents {
  std::string root;  // the folder libtorch reads every record from: the first record's
  // The GLOBALs each checked pickle names, in order, by the pickle's name ("data").
  std::map<std::string, std::vector<PickleGlobal>> globals;
  // The records that data.pkl's persistent ids name (lower case: "archive/data/0"), those of
  // storages of one element or more.
  std::set<std::string> storages;
  // Every stored (uncompressed) record's bytes, by its lower-case name: views of the archive.
  std::map<std::string, std::string_view> stored;
};

// Checks the archive `bytes` of `kind`: its pickles ("data" for <root>/data.pkl, whose
// storages are <root>/data/<key>; a model file's "constants" too, if there). Calls `fail`
// (which must throw) with what is wrong at the first problem.
ArchiveContents checkArchive(std::string_view bytes, ArchiveKind kind, const Fail& fail);

}  // namespace pstrain::zip
