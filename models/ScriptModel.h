#pragma once
// A model of the user's own: a TorchScript file (torch.jit.script(model).save(FILE), or
// torch.jit.trace) behind the zoo's Net interface. Its parameters and buffers are the
// TorchScript module's own tensors, registered under the same dotted names (so state_dict
// keys are those of the user's nn.Module), which the protocol binds to its flat buffers like
// any model's; train()/eval() switch the module's dropout and BatchNorm.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/Registry.h"

namespace pstrain::models {

// Loads `path` on the CPU (move it with to() afterwards: libtorch 1.13 cannot load straight
// onto MPS). Throws ConfigError naming the file and what to do when it is missing, not
// TorchScript, or written by a PyTorch whose format or operators this libtorch lacks.
// Turns TorchScript's graph optimizer off for the whole process: the profiling executor
// recompiles during the first calls and its fusers may change numerics, and runs must be
// reproducible.
// The file is opened once (a FIFO in its place is refused) and read by that descriptor
// (ModelFile.h): everything below checks and loads its image, never the path again, and its
// large storages are read into their tensors only, those of the parameters wholly outside
// `needed` (of the weights `needed` gives from the loaded model's shapes) not at all: the
// model then holds no values there (Net::heldWeights). A file changed while it loads is
// refused. It must be a sound PyTorch
// archive (zip/ArchiveCheck.h: records within the file and stored, storages exactly the size
// of their records).
// A model file is a program: torch::jit::load runs its __setstate__ methods and training
// runs its forward, and TorchScript can reach files (aten::save, aten::from_file: any
// operator with a filename) and other machines (rpc). Unless trustModelFiles() is set
// (--trust-model), such a file is refused with a ConfigError naming the operator: before
// loading, by the code of every class its data names (whatever the namespace: a name that is
// neither one of libtorch's own nor a class its code defines is refused), and after, by every
// compiled function of its module and submodules. The check before loading compiles the
// file's code, and libtorch's TorchScript parser can crash on a damaged or hostile file (1.13
// dies of SIGSEGV in ScriptTypeParser on some the fuzz tier makes): it runs first in a
// process of its own, modelCheckCommand(), given the file as its standard input, whose
// death refuses the file with a ConfigError.
std::shared_ptr<Net> loadScriptModel(const std::string& path, const WeightsNeeded& needed = {});

// Whether model files may call such operators (set by main() from --trust-model).
bool& trustModelFiles();

// The command of the check process ({program, "--check-model"}; the file's path and
// "--stdin" are appended, and the file open by the loader is its standard input).
// Empty (the default, as in tests): the check runs in this process alone.
std::vector<std::string>& modelCheckCommand();

// For main() of a program that loads model files, first thing. When argv is {program,
// "--check-model", FILE} (FILE opened here) or {program, "--check-model", FILE, "--stdin"}
// (FILE open as standard input), this process is the check process: it checks them
// (printing a refusal on stdout) and returns the exit status, 0 or 2. Otherwise it makes this program
// the check process of the models it loads (modelCheckCommand) and returns nullopt.
// The check process runs no MPI: it is started from a rank, not by mpirun.
std::optional<int> serveModelCheck(int argc, char** argv);

}  // namespace pstrain::models
