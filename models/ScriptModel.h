#pragma once
// A model of the user's own: a TorchScript file (torch.jit.script(model).save(FILE), or
// torch.jit.trace) behind the zoo's Net interface. Its parameters and buffers are the
// TorchScript module's own tensors, registered under the same dotted names (so state_dict
// keys are those of the user's nn.Module), which the protocol binds to its flat buffers like
// any model's; train()/eval() switch the module's dropout and BatchNorm.
#include <functional>
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
// refused. It must be a sound PyTorch archive (zip/ArchiveCheck.h: records within the file
// and stored, storages exactly the size of their records, tensors within their storages)
// whose large storages overlap nothing else (ModelFile.h).
// A model file is a program: torch::jit::load runs its __setstate__ methods and training
// runs its forward, and TorchScript can reach files (aten::save, aten::from_file: any
// operator with a filename) and other machines (rpc). Unless modelFilePolicy().trusted is set
// (--trust-model), such a file is refused with a ConfigError naming the operator: before
// loading, by the code of every class its data names (whatever the namespace: a name that is
// neither one of libtorch's own nor a class its code defines is refused), and after, by every
// compiled function of its module and submodules. The check before loading compiles the
// file's code, and libtorch's TorchScript parser can crash on a damaged or hostile file (1.13
// dies of SIGSEGV in ScriptTypeParser on some the fuzz tier makes): it runs first in a
// process of its own, modelCheckCommand(), given the file as its standard input, whose
// death refuses the file with a ConfigError. There, once the checks passed, the file is
// loaded as this process will load it, in a sandbox where its code cannot write a file, open
// a socket or run a program (Linux; portable::forbidWritesSocketsAndPrograms): any failure
// of that load refuses the file, with what the load here would have said.
// Each stage has a limit, modelFilePolicy().seconds: the check process is stopped when it
// passes (a ConfigError naming the file and the stage), and a load here that passes it
// (its code never ends) calls modelFilePolicy().onStuckLoad, which ends the process.
std::shared_ptr<Net> loadScriptModel(const std::string& path, const WeightsNeeded& needed = {});

// How model files are loaded: set by main() from the flags before any is.
struct ModelFilePolicy {
  // --trust-model: their code may call file and network operators, and is not checked.
  bool trusted = false;
  // --timeout: the most that checking a file (the check process) and loading it (running
  // its code) may each take, in seconds.
  double seconds = 300;
  // Called from a thread of its own with what to say when a load passes `seconds`: it must
  // end the process (nothing else stops the code a load runs). Unset: the message on
  // stderr, then exit 2.
  std::function<void(const std::string& message)> onStuckLoad;
  // The frozen weights that a file holds no values for (Net::unfilled) are made in
  // bfloat16: a worker under --precision bf16 or bf16-weights holds its frozen base in half
  // the memory, and --init-from reads it straight into that, never in float32 whole.
  bool halfFrozen = false;
};
ModelFilePolicy& modelFilePolicy();

// The command of the check process ({program, "--check-model"}; the file's path, "--stdin",
// "--parent" and this process's pid are appended, and the file open by the loader is its
// standard input). Empty (the default, as in tests): the check runs in this process alone.
std::vector<std::string>& modelCheckCommand();

// For main() of a program that loads model files, first thing. When argv is {program,
// "--check-model", FILE} (FILE opened here) or {program, "--check-model", FILE, "--stdin",
// "--parent", PID} (FILE open as standard input; the process ends as soon as PID is no
// longer its parent, however that process ended), this process is the check process: it
// checks them (printing a refusal on stdout) and returns the exit status, 0 or 2. Otherwise
// it makes this program the check process of the models it loads (modelCheckCommand) and
// returns nullopt. The check process runs no MPI: it is started from a rank, not by mpirun.
std::optional<int> serveModelCheck(int argc, char** argv);

}  // namespace pstrain::models
