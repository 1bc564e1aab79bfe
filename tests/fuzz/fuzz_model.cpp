// libFuzzer target: a model file (the input, as a .pt file) loads or is refused with a
// ConfigError, never crashes, hangs or runs its code. Loaded as pstrain loads --model without
// --trust-model. Seeds: tests/fuzz/corpus/model, the 14 hostile files of
// tests/e2e/untrusted_models.py, each of which writes NAME-wrote.bin in the working directory
// where its code runs: such a file appearing is a finding too. As in pstrain, the check runs
// first in a process of its own (this program, with --check-model FILE), whose crash on a
// file (libtorch 1.13's TorchScript parser has SEGVs) refuses the file. Mutated as archives
// (ArchiveMutator.h: names, pickle opcodes, declared sizes, the zip, records moved into the
// large storages that the image leaves out: 64 bytes or more in this build) as well as bytes;
// a model that loads runs a forward on a small input, as pstrain's start-up does.
#include <cstdlib>
#include <filesystem>
#include <string>

#include <torch/torch.h>

#include "models/ScriptModel.h"
#include "runtime/Errors.h"
#include "tests/fuzz/ArchiveMutator.h"
#include "tests/fuzz/FuzzFile.h"

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  if (const auto status = pstrain::models::serveModelCheck(*argc, *argv)) std::exit(*status);
  pstrain::models::modelFilePolicy().seconds = 10;  // a check that loops is stopped before libFuzzer's -timeout
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fs = std::filesystem;
  const std::string path = pstrain::fuzz::writeInput(data, size, "model.pt");
  std::shared_ptr<pstrain::models::Net> net;
  try {
    net = pstrain::models::loadScriptModel(path);
  } catch (const pstrain::ConfigError&) {
  }
  if (net) {  // pstrain's start-up forward: a failure formats a TorchScript traceback (debug records)
    try {
      net->forward(torch::zeros({1, 4}));
    } catch (const std::exception&) {
    }
  }
  for (const auto& entry : fs::directory_iterator(fs::current_path())) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 10 && name.compare(name.size() - 10, 10, "-wrote.bin") == 0) __builtin_trap();  // its code ran
  }
  return 0;
}
