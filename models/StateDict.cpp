#include "models/StateDict.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <set>

#include "runtime/Errors.h"
#include "runtime/Text.h"
#include "runtime/checkpoint/WeightsFile.h"

namespace pstrain::models {

std::vector<std::pair<std::string, at::Tensor>> stateDict(const Net& model) {
  std::vector<std::pair<std::string, at::Tensor>> entries;
  for (const auto& item : model.named_parameters()) entries.emplace_back(item.key(), item.value());
  for (auto& entry : model.frozen()) entries.push_back(std::move(entry));
  for (const auto& item : model.named_buffers()) entries.emplace_back(item.key(), item.value());
  const std::map<std::string, at::Tensor> named(entries.begin(), entries.end());
  for (const auto& [alias, name] : model.ties()) entries.emplace_back(alias, named.at(name));
  return entries;
}

std::string parameterSignature(const Net& model) {
  std::string signature;
  for (const auto& [key, tensor] : stateDict(model)) {
    if (!signature.empty()) signature += ",";
    signature += key + ":";
    for (std::int64_t i = 0; i < tensor.dim(); ++i) {
      signature += (i ? "x" : "") + std::to_string(tensor.size(i));
    }
  }
  return signature;
}

void checkStateDictFits(const Net& model, const std::vector<std::pair<std::string, at::Tensor>>& state,
                        const std::string& source) {
  const auto own = stateDict(model);
  std::map<std::string, at::Tensor> given;
  for (const auto& [key, tensor] : state) {
    if (!given.emplace(key, tensor).second) throw ConfigError(fmt::format("{}: names '{}' twice", source, printable(key)));
  }
  if (given.size() != own.size()) {
    throw ConfigError(fmt::format("{}: holds {} tensors, the model has {} (a checkpoint of another model?)", source,
                                  given.size(), own.size()));
  }
  for (const auto& [key, tensor] : own) {
    const auto it = given.find(key);
    if (it == given.end()) throw ConfigError(fmt::format("{}: has no '{}' (a checkpoint of another model?)", source, key));
    if (it->second.sizes() != tensor.sizes()) {
      throw ConfigError(fmt::format("{}: '{}' has shape {}, the model needs {}", source, key,
                                    fmt::join(it->second.sizes(), "x"), fmt::join(tensor.sizes(), "x")));
    }
  }
}

void loadStateDict(Net& model, const std::vector<std::pair<std::string, at::Tensor>>& state,
                   const std::string& source) {
  checkStateDictFits(model, state, source);
  const std::map<std::string, at::Tensor> given(state.begin(), state.end());
  torch::NoGradGuard noGrad;
  for (auto& [key, tensor] : stateDict(model)) {
    try {
      tensor.copy_(given.at(key));
    } catch (const c10::Error& e) {
      const std::string why = e.what_without_backtrace();
      throw CheckpointError(fmt::format("{}: '{}' cannot be loaded ({})", source, key, why.substr(0, why.find('\n'))));
    }
  }
}

namespace {

constexpr std::string_view kCompiledPrefix = "_orig_mod.";  // torch.compile's module's names

// Whether `name` matches `pattern`, where '#' stands for a run of digits (a layer number).
bool matches(const std::string& name, const std::string& pattern) {
  std::size_t n = 0;
  for (std::size_t p = 0; p < pattern.size(); ++p) {
    if (pattern[p] != '#') {
      if (n >= name.size() || name[n++] != pattern[p]) return false;
      continue;
    }
    const std::size_t start = n;
    while (n < name.size() && name[n] >= '0' && name[n] <= '9') ++n;
    if (n == start) return false;
  }
  return n == name.size();
}

// The model's name for a file's name, as transformers maps them: torch.compile's
// "_orig_mod." taken off; a name the model lacks that it has under its base prefix (a
// checkpoint of the bare model: GPT-2's hub file) given that prefix.
std::string modelName(std::string name, const std::set<std::string>& own, const std::string& basePrefix) {
  if (name.compare(0, kCompiledPrefix.size(), kCompiledPrefix) == 0) name.erase(0, kCompiledPrefix.size());
  if (!basePrefix.empty() && !own.count(name) && own.count(basePrefix + "." + name)) return basePrefix + "." + name;
  return name;
}

// One tensor of the model with all its names (a tie's several), and the file's tensors that
// give it (by their place in the file).
struct Target {
  at::Tensor tensor;
  std::vector<std::string> names;
  std::vector<std::size_t> given;
  bool trained = false, frozen = false;
  std::int64_t flatBegin = 0;  // a trained tensor's, in the flat layout
};

std::vector<Target> targetsOf(const Net& model) {
  std::vector<Target> targets;
  std::map<const void*, std::size_t> index;
  for (const auto& [name, tensor] : stateDict(model)) {
    const auto [at, fresh] = index.emplace(tensor.unsafeGetTensorImpl(), targets.size());
    if (fresh) targets.push_back({tensor, {}, {}});
    targets[at->second].names.push_back(name);
  }
  std::int64_t offset = 0;
  for (const auto& p : model.parameters()) {
    Target& t = targets[index.at(p.unsafeGetTensorImpl())];
    t.trained = true;
    t.flatBegin = offset;
    offset += p.numel();
  }
  for (const auto& [name, w] : model.frozen()) targets[index.at(w.unsafeGetTensorImpl())].frozen = true;
  return targets;
}

}  // namespace

Pretrained loadPretrained(Net& model, const checkpoint::WeightsReader& file, const std::string& source) {
  const std::vector<checkpoint::StoredTensor>& stored = file.tensors();
  const ModelFacts& facts = model.facts();
  std::set<std::string> own;
  for (const auto& [name, tensor] : stateDict(model)) own.insert(name);
  std::map<std::string, std::size_t> byName;  // the model's name -> the file's tensor
  std::vector<std::string> twice, unexpected, missing, misshapen, unequal;
  for (std::size_t i = 0; i < stored.size(); ++i) {
    const std::string name = modelName(stored[i].name, own, facts.basePrefix);
    if (!own.count(name) && std::any_of(facts.ignored.begin(), facts.ignored.end(),
                                        [&](const std::string& p) { return matches(stored[i].name, p); })) {
      continue;  // left unread, as transformers leaves it
    }
    if (!byName.emplace(name, i).second) {
      twice.push_back(fmt::format("{} (as {} and {})", name, stored[byName.at(name)].name, stored[i].name));
    }
  }
  const std::vector<std::string> unfilled = model.unfilled();
  std::vector<Target> targets = targetsOf(model);
  Pretrained result;
  result.tensors = stored.size();
  const bool fineTune = !model.frozen().empty();
  for (Target& t : targets) {
    for (const std::string& n : t.names) {
      const auto it = byName.find(n);
      if (it == byName.end()) continue;
      t.given.push_back(it->second);
      byName.erase(it);  // what is left is unexpected
      const checkpoint::StoredTensor& s = stored[t.given.back()];
      if (at::IntArrayRef(s.sizes) != t.tensor.sizes()) {
        misshapen.push_back(fmt::format("{} is [{}], the model's [{}]", n, fmt::join(s.sizes, ", "),
                                        fmt::join(t.tensor.sizes(), ", ")));
      }
    }
    // A fine-tune's adapters may be missing (they keep the model's values), but never a
    // tensor the model file holds no values for.
    const bool placeholder = std::any_of(t.names.begin(), t.names.end(), [&](const std::string& n) {
      return std::find(unfilled.begin(), unfilled.end(), n) != unfilled.end();
    });
    if (t.given.empty()) {
      (t.trained && fineTune && !placeholder ? result.kept : missing).push_back(fmt::format("{}", fmt::join(t.names, " = ")));
    }
  }
  for (const auto& [name, i] : byName) unexpected.push_back(name);
  std::string problems;
  const auto say = [&](const std::vector<std::string>& names, const char* what) {
    if (!names.empty()) problems += fmt::format("; {} ({}): {}", what, names.size(), fmt::join(names, ", "));
  };
  const auto refuseIfAny = [&] {
    if (problems.empty()) return;
    throw ConfigError(printable(fmt::format("{}: does not fit the model's state_dict{}; its names and shapes must be "
                                            "the model's (those of model.state_dict() in PyTorch)", source, problems)));
  };
  say(twice, "named twice");
  say(missing, "missing");
  say(unexpected, "unexpected");
  say(misshapen, "of another shape");
  refuseIfAny();
  // Read: each tensor once, straight into the model's; the frozen ones (which every rank
  // reads whole) into the identity.
  const models::FlatSpan held = model.heldWeights();
  std::uint32_t crc = file.structureCrc();
  torch::NoGradGuard noGrad;
  for (Target& t : targets) {
    if (t.given.empty()) continue;
    if (t.trained && (t.flatBegin + t.tensor.numel() <= held.begin || t.flatBegin >= held.end)) continue;
    file.read(stored[t.given.front()], t.tensor, t.frozen ? &crc : nullptr);
    for (std::size_t k = 1; k < t.given.size(); ++k) {  // a tie's further names in the file: the same values
      if (!torch::equal(file.read(stored[t.given[k]]).to(t.tensor.scalar_type()), t.tensor)) {
        unequal.push_back(fmt::format("{} and {}", stored[t.given.front()].name, stored[t.given[k]].name));
      }
    }
  }
  say(unequal, "tied in the model but unequal in the file");
  refuseIfAny();
  result.identity = fmt::format("crc32 {:08x} of its structure and frozen weights, {} bytes", crc, file.bytes());
  return result;
}

}  // namespace pstrain::models
