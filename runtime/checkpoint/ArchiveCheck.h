#pragma once
// A structural check of a torch.save / pickle_save archive before libtorch reads it.
//
// libtorch's reader trusts the sizes an archive declares: a zip record may claim more bytes
// than the file has, and the unpickler grows its memo table to any id the pickle names
// (LONG_BINPUT: up to 4 G entries) and allocates any string length it reads; a damaged or
// crafted checkpoint could make pseval allocate tens of GB (found by fuzz_checkpoint). This
// check bounds all of that by the file's own size: every record within the file, stored
// uncompressed as torch writes them, the pickle made of known protocol-2 opcodes whose
// lengths stay within the pickle, memo ids assigned in order, and no opcode taking more
// items from the stack than there are above its innermost MARK (libtorch does not check).
#include <string>
#include <string_view>
#include <vector>

namespace pstrain::checkpoint {

// Throws CheckpointError naming `path` and the first problem found.
void checkArchive(const std::string& bytes, const std::string& path);

// The same check of one pickle of a TorchScript archive (which may hold objects of its
// classes: NEWOBJ); returns the classes its GLOBAL opcodes name, as "module.name"
// ("__torch__.Net", "torch._utils._rebuild_tensor_v2"), in order.
std::vector<std::string> pickleGlobals(std::string_view pickle, const std::string& path);

}  // namespace pstrain::checkpoint
