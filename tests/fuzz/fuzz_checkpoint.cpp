// libFuzzer target: a published checkpoint whose .pt holds the input, with a marker that
// matches it (so the input reaches the unpickler and the structure checks), must read back
// or fail with a CheckpointError, never crash or throw anything else; so must the marker
// itself when it is the input. Mutated as archives (ArchiveMutator.h) as well as bytes.
#include <fmt/format.h>
#include <zlib.h>

#include <filesystem>

#include "runtime/rundir/AtomicFile.h"
#include "runtime/Errors.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "tests/fuzz/ArchiveMutator.h"
#include "tests/fuzz/FuzzFile.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fs = std::filesystem;
  static const fs::path dir = fs::path(pstrain::fuzz::writeInput(nullptr, 0, "ckpt-dir")).concat(".d");
  fs::create_directories(dir);
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const std::string pt = (dir / "step-00000001.pt").string(), ok = (dir / "step-00000001.ok").string();
  pstrain::rundir::atomicWrite(pt, bytes);
  auto crc = crc32(0, reinterpret_cast<const Bytef*>(data), static_cast<uInt>(size));
  for (const std::string& marker : {fmt::format("pstrain-checkpoint 1\nbytes {}\ncrc32 {:08x}\n", size, crc), bytes}) {
    pstrain::rundir::atomicWrite(ok, marker);
    try {
      pstrain::checkpoint::read({1, pt});
    } catch (const pstrain::CheckpointError&) {
    }
  }
  try {
    pstrain::checkpoint::readStateDict(pt);
  } catch (const pstrain::CheckpointError&) {
  }
  return 0;
}
