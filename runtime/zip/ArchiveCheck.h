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
//   - each pickle passes zip/Pickle.h's reader (a checkpoint's under its Weights rules, a
//     model file's under its ModelFile rules): nesting, memory, opcodes, stack and memo,
//     storages exactly the size of their records, tensors within their storages.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/zip/Pickle.h"
#include "runtime/zip/ZipDirectory.h"

namespace pstrain::zip {

// What the archive is: a checkpoint (torch.save's form: data.pkl, no objects, every record
// stored) or a model file (torch.jit.save's: data.pkl and constants.pkl, whose pickles make
// objects of its TorchScript classes, and deflated code).
enum class ArchiveKind { Checkpoint, ModelFile };

constexpr std::uint64_t kMaxInflated = std::uint64_t(64) << 20;
constexpr std::uint64_t kMaxInflatedTotal = std::uint64_t(256) << 20;

// The largest pickle read (a state dict of a million tensors takes about 100 MB of it).
constexpr std::uint64_t kMaxPickleBytes = std::uint64_t(256) << 20;

// What the check found. Move it, never copy it: its pickles' texts view its pickleBytes.
struct ArchiveContents {
  ArchiveContents() = default;
  ArchiveContents(ArchiveContents&&) = default;
  ArchiveContents& operator=(ArchiveContents&&) = default;
  ArchiveContents(const ArchiveContents&) = delete;
  ArchiveContents& operator=(const ArchiveContents&) = delete;

  std::string root;  // the folder libtorch reads every record from: the first record's
  // Each checked pickle's bytes, and what it made, by the pickle's name ("data", "constants").
  std::map<std::string, std::string> pickleBytes;
  std::map<std::string, Pickled> pickles;
  // The records that data.pkl's persistent ids name (lower case: "archive/data/0"), those of
  // storages of one element or more.
  std::set<std::string> storages;
  // Where every stored (uncompressed) record's data lie in the archive, by its lower-case name.
  std::map<std::string, Span> stored;
  // The CRC-32 of every record's name, size and the CRC-32 the directory records of its data:
  // what the archive says it holds, without reading its data.
  std::uint32_t directoryCrc = 0;
};

// Checks the archive of `size` bytes that `read` reads (only its directory, its headers and
// its pickles: a storage's data are not read): its pickles ("data" for <root>/data.pkl, whose
// storages are <root>/data/<key>; a model file's "constants" too, if there). Calls `fail`
// (which must throw) with what is wrong at the first problem.
ArchiveContents checkArchive(std::uint64_t size, const ReadAt& read, ArchiveKind kind, const Fail& fail);
// The same of the archive `bytes`.
ArchiveContents checkArchive(std::string_view bytes, ArchiveKind kind, const Fail& fail);
// The bytes of the record whose data are `data` in the archive `bytes`.
std::string_view recordOf(std::string_view bytes, const Span& data);

}  // namespace pstrain::zip
