#include "launcher/Export.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "runtime/Errors.h"
#include "runtime/Text.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/WeightsFile.h"
#include "runtime/metrics/Json.h"
#include "runtime/rundir/AtomicFile.h"
#include "runtime/rundir/ReadFile.h"
#include "runtime/rundir/RunFiles.h"
#include "runtime/zip/Json.h"

namespace pstrain::launcher {
namespace {

namespace fs = std::filesystem;
using checkpoint::TensorList;

// The hub's largest shard (transformers' save_pretrained max_shard_size "5GB").
constexpr std::uint64_t kMaxShardBytes = 5'000'000'000;
// The files of a hub folder that describe the model and its tokenizer, copied beside merged weights.
constexpr const char* kHubFiles[] = {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                                     "special_tokens_map.json", "tokenizer.model", "vocab.json", "merges.txt",
                                     "added_tokens.json"};

[[noreturn]] void refuse(const EvalCommand& cmd, const std::string& why) {
  throw ConfigError(fmt::format("--export {}: {}", cmd.exportPath, why));
}

// --export FILE's target, before anything is read or written: a name whose format pstrain
// writes (.safetensors, .pt, .pth; --format: a folder), in a folder that exists, that is a
// regular file (a folder: an empty one) if it is there at all (a FIFO or a device node is
// never replaced), and not among the train dir's published checkpoints.
void checkTarget(const EvalCommand& cmd) {
  const fs::path target(cmd.exportPath);
  const std::string name = target.filename().string();
  if (cmd.exportFormat.empty() && !endsWith(name, ".safetensors") && !endsWith(name, ".pt") && !endsWith(name, ".pth")) {
    refuse(cmd, "pseval writes FILE.safetensors (Hugging Face, MLX) or FILE.pt (a state dict for torch.load), and this "
                "name is neither (the extension decides the format, in lower case; --format hf|peft|mlx writes a folder)");
  }
  const fs::path folder = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code error;
  if (!fs::is_directory(folder, error)) refuse(cmd, fmt::format("there is no folder {} to write it in", folder.string()));
  const fs::file_status status = fs::status(target, error);
  if (cmd.exportFormat.empty() && fs::exists(status) && !fs::is_regular_file(status)) {
    refuse(cmd, "it is there and not a regular file (a folder, a FIFO or a device): pseval replaces only a file");
  }
  if (!cmd.exportFormat.empty() && fs::exists(status) && (!fs::is_directory(status) || !fs::is_empty(target, error))) {
    refuse(cmd, "it is there and not an empty folder: --format writes a new folder, and replaces nothing");
  }
  const fs::path checkpoints = fs::path(cmd.trainDir) / rundir::kCheckpoints;
  if (fs::is_directory(checkpoints, error) && fs::equivalent(folder, checkpoints, error)) {
    refuse(cmd, fmt::format("it is in {}, among the run's checkpoints, which pseval never replaces", checkpoints.string()));
  }
}

// The newest published checkpoint, or --step's; ConfigError for one that fails its checks
// (the one file asked for: a refusal, not a skip).
checkpoint::Checkpoint chosenCheckpoint(const EvalCommand& cmd) {
  const auto published = rundir::listPublished((fs::path(cmd.trainDir) / rundir::kCheckpoints).string());
  if (published.empty()) throw Error(fmt::format("{}/ckpt: no published checkpoints to export", cmd.trainDir));
  auto chosen = published.end() - 1;
  if (cmd.exportStep >= 0) {
    chosen = std::find_if(published.begin(), published.end(), [&](const auto& p) { return p.step == cmd.exportStep; });
    if (chosen == published.end()) {
      std::string steps;
      for (const auto& p : published) steps += (steps.empty() ? "" : ", ") + std::to_string(p.step);
      throw ConfigError(fmt::format("--step {}: no published checkpoint of that step in {}/ckpt (steps: {})",
                                    cmd.exportStep, cmd.trainDir, steps));
    }
  }
  try {
    return checkpoint::read(*chosen);
  } catch (const CheckpointError& e) {
    throw ConfigError(e.what());
  }
}

// What tools/hf_model.py said of the model (the checkpoint's model_facts): its family, its
// LoRA adapters and its hub folder.
struct HubModel {
  std::string family, basePrefix, hubDir;
  std::int64_t layers = 0;
  struct Lora {
    std::int64_t rank = 0;
    double alpha = 0;
    std::vector<std::string> targets, modules;
  };
  std::optional<Lora> lora;
};

HubModel hubModelOf(const EvalCommand& cmd, const checkpoint::Checkpoint& ckpt) {
  const auto bad = [&](const std::string& what) {
    refuse(cmd, fmt::format("--format {} writes a model of tools/hf_model.py's, and step {}'s {}", cmd.exportFormat,
                            ckpt.step, what));
  };
  if (ckpt.modelFacts.empty()) bad("model file says nothing of a hub model (a model of another kind: --export FILE)");
  const zip::JsonValue facts = zip::parseJson(ckpt.modelFacts, [&](const std::string& what) { bad("facts are " + what); });
  const zip::JsonValue* hf = facts.member("hf");
  if (!hf || hf->kind != zip::JsonValue::Kind::Object) bad("model file says nothing of a hub model (--export FILE)");
  const auto text = [&](const char* key) {
    const zip::JsonValue* v = hf->member(key);
    if (!v || v->kind != zip::JsonValue::Kind::String) bad(fmt::format("facts lack hf.{}", key));
    return v->text;
  };
  HubModel m;
  m.family = text("model_type");
  m.basePrefix = text("base_model_prefix");
  m.hubDir = text("hub_dir");
  const zip::JsonValue* config = hf->member("config");
  const zip::JsonValue* layers = config ? config->member(m.family == "gpt2" ? "n_layer" : "num_hidden_layers") : nullptr;
  if (!layers || !layers->count()) bad("facts lack the config's number of layers");
  m.layers = static_cast<std::int64_t>(*layers->count());
  const zip::JsonValue* lora = hf->member("lora");
  if (lora && lora->kind == zip::JsonValue::Kind::Object) {
    HubModel::Lora l;
    const zip::JsonValue* r = lora->member("r");
    const zip::JsonValue* alpha = lora->member("alpha");
    if (!r || !r->count() || !alpha || alpha->kind != zip::JsonValue::Kind::Number) bad("facts lack LoRA's r and alpha");
    l.rank = static_cast<std::int64_t>(*r->count());
    l.alpha = std::stod(alpha->text);
    for (const char* key : {"targets", "modules"}) {
      const zip::JsonValue* list = lora->member(key);
      if (!list || list->kind != zip::JsonValue::Kind::Array) bad(fmt::format("facts lack LoRA's {}", key));
      for (const zip::JsonValue& item : list->items) (std::string(key) == "targets" ? l.targets : l.modules).push_back(item.text);
    }
    m.lora = l;
  }
  return m;
}

// The checkpoint's tensors by name.
std::map<std::string, at::Tensor> byName(const TensorList& state) { return {state.begin(), state.end()}; }

const at::Tensor& tensorNamed(const std::map<std::string, at::Tensor>& state, const std::string& name) {
  const auto it = state.find(name);
  if (it == state.end()) throw Error(fmt::format("the checkpoint has no '{}', which its model's facts name", name));
  return it->second;
}

bool isAdapter(const std::string& name) {
  return name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos;
}

// The hub folder that --init-from read (its config and tokenizer), as the checkpoint says.
fs::path hubFolder(const EvalCommand& cmd, const checkpoint::Checkpoint& ckpt, const HubModel& m) {
  std::error_code error;
  for (const std::string& given : {ckpt.initFromPath, m.hubDir}) {
    if (given.empty()) continue;
    const fs::path p = fs::is_directory(given, error) ? fs::path(given) : fs::path(given).parent_path();
    if (fs::exists(p / "config.json", error)) return p;
  }
  refuse(cmd, fmt::format("--format hf copies config.json and the tokenizer from the --init-from folder ({}), and it "
                          "has no config.json", ckpt.initFromPath.empty() ? m.hubDir : ckpt.initFromPath));
}

// A folder made whole beside its target, then renamed into place.
class NewFolder {
 public:
  explicit NewFolder(const std::string& target)
      : target_(target), temp_(target + ".pseval-" + std::to_string(::getpid())) {
    fs::remove_all(temp_);
    fs::create_directories(temp_);
  }
  ~NewFolder() {
    std::error_code error;
    if (!done_) fs::remove_all(temp_, error);
  }
  std::string path(const std::string& name) const { return (temp_ / name).string(); }
  void commit() {
    std::error_code error;
    fs::remove(target_, error);  // an empty folder (checked)
    fs::rename(temp_, target_);
    done_ = true;
  }

 private:
  fs::path target_, temp_;
  bool done_ = false;
};

void writeJson(const std::string& path, const std::string& json) { rundir::atomicWrite(path, json + "\n"); }

// hf: W + alpha/r B A for each adapted module, the adapters gone; each tensor once (a tie
// under its first name, as the checkpoint records it: save_pretrained leaves the tied head
// out); shards past 5 GB.
void exportHf(const EvalCommand& cmd, const checkpoint::Checkpoint& ckpt, const HubModel& m, NewFolder& out) {
  const fs::path hub = hubFolder(cmd, ckpt, m);
  const auto state = byName(ckpt.modelState);
  std::map<std::string, at::Tensor> merged;
  if (m.lora) {
    const double scale = m.lora->alpha / static_cast<double>(m.lora->rank);
    for (const std::string& module : m.lora->modules) {
      const at::Tensor& a = tensorNamed(state, module + ".lora_A.weight");
      const at::Tensor& b = tensorNamed(state, module + ".lora_B.weight");
      const at::Tensor delta = torch::matmul(b.to(torch::kFloat), a.to(torch::kFloat)) * scale;  // [out, in]
      const at::Tensor& w = tensorNamed(state, module + ".weight");
      merged[module + ".weight"] = (w.to(torch::kFloat) + (m.family == "gpt2" ? delta.t() : delta)).to(w.scalar_type());
    }
  }
  TensorList tensors;
  std::set<std::string> aliases;
  for (const auto& [alias, name] : ckpt.ties) aliases.insert(alias);
  std::uint64_t total = 0;
  for (const auto& [name, tensor] : ckpt.modelState) {
    if (isAdapter(name) || aliases.count(name)) continue;
    const auto it = merged.find(name);
    tensors.emplace_back(name, it != merged.end() ? it->second : tensor);
    total += tensors.back().second.nbytes();
  }
  // Shards of at most kMaxShardBytes each, in order; one file when it fits.
  std::vector<TensorList> shards(1);
  std::uint64_t inShard = 0;
  for (auto& entry : tensors) {
    if (inShard > 0 && inShard + entry.second.nbytes() > kMaxShardBytes) shards.emplace_back(), inShard = 0;
    shards.back().push_back(entry);
    inShard += entry.second.nbytes();
  }
  if (shards.size() == 1) {
    checkpoint::writeWeightsFile(out.path("model.safetensors"), shards[0]);
  } else {
    metrics::JsonObject map;
    for (std::size_t s = 0; s < shards.size(); ++s) {
      const std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
      checkpoint::writeWeightsFile(out.path(file), shards[s]);
      for (const auto& [name, tensor] : shards[s]) map.add(name, file);
    }
    metrics::JsonObject meta;
    meta.add("total_size", static_cast<std::int64_t>(total));
    metrics::JsonObject index;
    index.addRaw("metadata", meta.str()).addRaw("weight_map", map.str());
    writeJson(out.path("model.safetensors.index.json"), index.str());
  }
  for (const char* name : kHubFiles) {
    std::error_code error;
    if (fs::exists(hub / name, error)) fs::copy_file(hub / name, out.path(name));
  }
}

// The adapters' pairs, each [r, in] and [out, r], by module.
struct Pair {
  std::string module;
  at::Tensor a, b;
};
std::vector<Pair> adapterPairs(const EvalCommand& cmd, const checkpoint::Checkpoint& ckpt, const HubModel& m) {
  if (!m.lora) {
    refuse(cmd, fmt::format("--format {} writes LoRA adapters, and step {}'s model has none (a full fine-tune: "
                            "--format hf)", cmd.exportFormat, ckpt.step));
  }
  const auto state = byName(ckpt.modelState);
  std::vector<Pair> pairs;
  for (const std::string& module : m.lora->modules) {
    pairs.push_back({module, tensorNamed(state, module + ".lora_A.weight").to(torch::kFloat).contiguous(),
                     tensorNamed(state, module + ".lora_B.weight").to(torch::kFloat).contiguous()});
  }
  return pairs;
}

// peft: PEFT's adapter_model.safetensors and adapter_config.json.
void exportPeft(const EvalCommand& cmd, const checkpoint::Checkpoint& ckpt, const HubModel& m, NewFolder& out) {
  TensorList tensors;
  for (const Pair& p : adapterPairs(cmd, ckpt, m)) {
    tensors.emplace_back("base_model.model." + p.module + ".lora_A.weight", p.a);
    tensors.emplace_back("base_model.model." + p.module + ".lora_B.weight", p.b);
  }
  checkpoint::writeWeightsFile(out.path("adapter_model.safetensors"), tensors);
  metrics::JsonObject config;
  config.add("peft_type", "LORA").add("task_type", "CAUSAL_LM").add("base_model_name_or_path", m.hubDir);
  config.add("r", m.lora->rank).add("lora_alpha", m.lora->alpha).add("lora_dropout", 0.0);
  config.addRaw("target_modules", metrics::jsonArray(m.lora->targets));
  config.add("bias", "none").add("fan_in_fan_out", m.family == "gpt2").add("inference_mode", true);
  config.add("init_lora_weights", true).add("use_rslora", false).add("use_dora", false);
  config.addRaw("modules_to_save", "null").addRaw("layers_to_transform", "null").addRaw("layers_pattern", "null");
  config.addRaw("rank_pattern", "{}").addRaw("alpha_pattern", "{}").addRaw("revision", "null");
  writeJson(out.path("adapter_config.json"), config.str());
}

// mlx: mlx-lm's adapters.safetensors (lora_a = A^T [in, r], lora_b = B^T [r, out], under
// mlx-lm's module names: GPT-2's "transformer." is its "model.") and the adapter_config.json
// that mlx_lm.lora writes (its LoRA on the last num_layers layers, on the keys given).
void exportMlx(const EvalCommand& cmd, const checkpoint::Checkpoint& ckpt, const HubModel& m, NewFolder& out) {
  const std::string layerPrefix = m.family == "gpt2" ? "transformer.h." : "model.layers.";
  TensorList tensors;
  std::set<std::string> keys;
  std::int64_t lowest = m.layers;
  for (const Pair& p : adapterPairs(cmd, ckpt, m)) {
    std::string name = p.module;
    if (m.family == "gpt2") name = "model." + name.substr(std::string("transformer.").size());
    tensors.emplace_back(name + ".lora_a", p.a.t().contiguous());
    tensors.emplace_back(name + ".lora_b", p.b.t().contiguous());
    if (p.module.rfind(layerPrefix, 0) != 0) {
      refuse(cmd, fmt::format("--format mlx: '{}' is not in a layer of the model, where mlx-lm puts adapters", p.module));
    }
    const std::string rest = p.module.substr(layerPrefix.size());
    lowest = std::min<std::int64_t>(lowest, std::stoll(rest.substr(0, rest.find('.'))));
    keys.insert(rest.substr(rest.find('.') + 1));
  }
  checkpoint::writeWeightsFile(out.path("adapters.safetensors"), tensors);
  metrics::JsonObject lora;
  lora.add("rank", m.lora->rank).add("scale", m.lora->alpha / static_cast<double>(m.lora->rank)).add("dropout", 0.0);
  lora.addRaw("keys", metrics::jsonArray(std::vector<std::string>(keys.begin(), keys.end())));
  metrics::JsonObject config;
  config.add("model", m.hubDir).add("fine_tune_type", "lora").add("num_layers", m.layers - lowest);
  config.addRaw("lora_parameters", lora.str());
  writeJson(out.path("adapter_config.json"), config.str());
}

}  // namespace

void exportWeights(const EvalCommand& cmd) {
  checkTarget(cmd);
  const checkpoint::Checkpoint ckpt = chosenCheckpoint(cmd);
  if (cmd.exportFormat.empty()) {
    checkpoint::writeWeightsFile(cmd.exportPath, ckpt.modelState, ckpt.ties);
    std::cout << fmt::format("pseval: step {}'s weights ({} tensors of {}) written to {}", ckpt.step,
                             ckpt.modelState.size(), ckpt.model, cmd.exportPath)
              << std::endl;
    return;
  }
  const HubModel m = hubModelOf(cmd, ckpt);
  NewFolder out(cmd.exportPath);
  if (cmd.exportFormat == "hf") exportHf(cmd, ckpt, m, out);
  if (cmd.exportFormat == "peft") exportPeft(cmd, ckpt, m, out);
  if (cmd.exportFormat == "mlx") exportMlx(cmd, ckpt, m, out);
  out.commit();
  std::cout << fmt::format("pseval: step {}'s {} ({}) written to {}", ckpt.step,
                           cmd.exportFormat == "hf" ? "weights, the adapters merged" : "LoRA adapters", cmd.exportFormat,
                           cmd.exportPath)
            << std::endl;
}

}  // namespace pstrain::launcher
