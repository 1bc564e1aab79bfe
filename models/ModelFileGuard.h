#pragma once
// The defence against a model file from anyone (--model FILE, unless --trust-model): its
// archive checked before libtorch reads it (zip/ArchiveCheck.h), its code's graphs checked
// for what reads or writes files or reaches other machines, a trial load in a sandboxed
// check process, and a time limit on the load itself. What passes is a TorchScript module
// whose large storages are still unread; ScriptModel.cpp's adapter (ScriptNet) trains it.
#include <torch/script.h>

#include <set>
#include <string>
#include <vector>

#include "models/ImageReader.h"
#include "models/ModelFile.h"
#include "models/Registry.h"

namespace pstrain::models {

// The record where pstrain's own facts about a model file go (tools/model_file.py writes it
// with torch.jit.save's _extra_files): what TorchScript drops, such as which buffers were
// registered with persistent=False.
constexpr const char* kFactsRecord = "extra/pstrain.json";

// What the file says of itself (kFactsRecord), and the buffers it registered with
// persistent=False.
struct FileFacts {
  ModelFacts model;
  std::set<std::string> nonPersistent;  // buffers registered with persistent=False
};

// A model file's module as the guard let it through: its large storages unread (each in
// `deferred`, for ScriptNet::readStorages), and its facts.
struct GuardedModule {
  torch::jit::Module module;
  std::vector<Deferred> deferred;
  FileFacts facts;
};
// Loads `file` (read from `path`) past every check above: throws ConfigError naming `path`
// and what was refused, or Error for ModelFile's own refusals.
GuardedModule loadGuarded(const ModelFile& file, const std::string& path);

}  // namespace pstrain::models
