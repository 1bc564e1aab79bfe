#include "models/ScriptModel.h"

#include <fmt/format.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/script.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "models/ImageReader.h"
#include "models/ModelFile.h"
#include "runtime/Errors.h"
#include "runtime/Text.h"
#include "runtime/checkpoint/BytesReader.h"
#include "runtime/zip/Json.h"

#include "models/ModelFileGuard.h"

namespace pstrain::models {
namespace {

// What a forward that computes its own loss returned (`out`), as OwnLoss: a scalar; a tuple
// or list holding exactly one scalar (nanoGPT's (logits, loss), Hugging Face's (loss,
// logits)) and perhaps a tensor shaped as `target` plus one dimension (its logits); or a dict
// with "loss" (and perhaps "logits"). Throws Error naming `declared` otherwise.
OwnLoss ownLossOf(const c10::IValue& out, const at::Tensor& target, const std::string& declared) {
  const auto isScalar = [](const c10::IValue& v) {
    return v.isTensor() && v.toTensor().dim() == 0 && v.toTensor().is_floating_point();
  };
  const auto isLogits = [&](const c10::IValue& v) {
    return v.isTensor() && v.toTensor().dim() == target.dim() + 1 &&
           v.toTensor().sizes().slice(0, static_cast<std::size_t>(target.dim())) == target.sizes();
  };
  if (isScalar(out)) return {out.toTensor(), {}};
  if (out.isGenericDict()) {
    const c10::impl::GenericDict dict = out.toGenericDict();
    const c10::IValue loss("loss"), logits("logits");
    if (dict.contains(loss) && isScalar(dict.at(loss))) {
      return {dict.at(loss).toTensor(), dict.contains(logits) && isLogits(dict.at(logits)) ? dict.at(logits).toTensor()
                                                                                           : at::Tensor()};
    }
    throw Error(fmt::format("its {} returned a dict without a scalar \"loss\"; a model that computes its own loss "
                            "returns it as a scalar, in a tuple, or as a dict's \"loss\"", declared));
  }
  std::vector<c10::IValue> items;
  if (out.isTuple()) items = out.toTupleRef().elements().vec();
  if (out.isList()) items = out.toList().vec();
  std::vector<at::Tensor> scalars, logits;
  for (const c10::IValue& item : items) {
    if (isScalar(item)) scalars.push_back(item.toTensor());
    else if (isLogits(item)) logits.push_back(item.toTensor());
  }
  if (scalars.size() != 1) {
    throw Error(fmt::format("its {} returned a {} holding {} scalars: pstrain trains a model whose forward(x, y) "
                            "returns its loss as the one scalar (a scalar, (logits, loss), or a dict's \"loss\")",
                            declared, lowerCase(out.tagKind()), scalars.size()));
  }
  return {scalars.front(), logits.empty() ? at::Tensor() : logits.front()};
}

// "forward(Tensor idx, Tensor targets) -> (Tensor, Tensor)": `schema` without self.
std::string describeForward(const c10::FunctionSchema& schema) {
  std::string args;
  for (std::size_t i = 1; i < schema.arguments().size(); ++i) {
    const c10::Argument& a = schema.arguments()[i];
    args += (i > 1 ? ", " : "") + a.type()->annotation_str() + " " + a.name() + (a.default_value() ? "=..." : "");
  }
  std::string returns;
  for (std::size_t i = 0; i < schema.returns().size(); ++i) {
    returns += (i ? ", " : "") + schema.returns()[i].type()->annotation_str();
  }
  return printable(fmt::format("forward({}) -> {}", args, returns));
}

class ScriptNet : public Net {
 public:
  // The module's own tensors, registered (not copied) under the same names, each once: a
  // parameter that requires grad is trained (binding it to the flat buffers, set_data, is
  // seen by the TorchScript code that reads it), one that does not is frozen, and a tensor
  // met again under another name is a tie. Tensors that view one storage otherwise (other
  // shapes or offsets of one tensor) would be untied by their binding: refused.
  // Buffers in `nonPersistent` (registered with persistent=False, as the file's facts say)
  // are the module's own: moved with it, never in stateDict(), exchanged or checkpointed, as
  // PyTorch's state_dict() leaves them out.
  ScriptNet(torch::jit::Module module, std::string path, std::string identity, std::set<std::string> nonPersistent,
            ModelFacts facts)
      : module_(std::move(module)), path_(std::move(path)), identity_(std::move(identity)), facts_(std::move(facts)) {
    fillPlaceholders();
    std::map<const void*, std::string> named;     // by tensor: the name it was met under first
    std::map<const void*, std::string> storages;  // by storage: the tensor's that holds it
    std::set<const void*> buffers;
    // False for a tensor met before (a tie, recorded), true for one to register.
    auto claim = [&](const std::string& name, const at::Tensor& t, bool buffer) {
      const auto [first, fresh] = named.emplace(t.unsafeGetTensorImpl(), name);
      if (!fresh) {
        if (buffer || buffers.count(t.unsafeGetTensorImpl())) {
          throw ConfigError(fmt::format("{}: '{}' is the same tensor as '{}', and one of them is a buffer; pstrain ties "
                                        "parameters only (as GPT-2's lm_head.weight and transformer.wte.weight)",
                                        path_, printable(name), printable(first->second)));
        }
        ties_.emplace_back(name, first->second);
        return false;
      }
      if (buffer) buffers.insert(t.unsafeGetTensorImpl());
      if (t.has_storage() && t.numel() > 0) {
        const auto [holder, own] = storages.emplace(t.storage().unsafeGetStorageImpl(), name);
        if (!own) {
          throw ConfigError(fmt::format(
              "{}: '{}' and '{}' are views of one storage with other shapes or offsets (parts of one tensor); pstrain "
              "trains each tensor of a model as its own and would untie them: make one of them the parameter and "
              "compute the other from it in forward (a tie of one tensor under two names, as GPT-2's, is trained as one)",
              path_, printable(holder->second), printable(name)));
        }
      }
      return true;
    };
    for (const auto& p : module_.named_parameters(/*recurse=*/true)) {
      if (!claim(p.name, p.value, false)) continue;
      if (!p.value.requires_grad()) {
        frozen_.emplace_back(p.name, p.value);
        continue;
      }
      auto [owner, leaf] = ownerOf(p.name);
      owner->register_parameter(leaf, p.value, true);
    }
    for (const auto& b : module_.named_buffers(/*recurse=*/true)) {
      if (nonPersistent.erase(b.name)) {
        internal_.push_back(b.value);
        continue;
      }
      if (!claim(b.name, b.value, true)) continue;
      auto [owner, leaf] = ownerOf(b.name);
      owner->register_buffer(leaf, b.value);
    }
    if (!nonPersistent.empty()) {
      throw ConfigError(fmt::format("{}: its {} names '{}' a non-persistent buffer, and the module has no buffer of "
                                    "that name; save the model again with tools/model_file.py", path_, kFactsRecord,
                                    printable(*nonPersistent.begin())));
    }
    const c10::FunctionSchema& schema = module_.get_method("forward").function().getSchema();
    declared_ = describeForward(schema);
    std::size_t required = 0;  // of its inputs (self aside)
    for (std::size_t i = 1; i < schema.arguments().size(); ++i) required += !schema.arguments()[i].default_value();
    const std::size_t inputs = schema.arguments().size() - 1;
    if (required > 2 || inputs == 0) {
      throw ConfigError(fmt::format("{}: its {} takes {} inputs; pstrain calls forward(x) of a model, or forward(x, "
                                    "y) of one that computes its own loss from the targets y", path_, declared_,
                                    required > 2 ? required : inputs));
    }
    ownLoss_ = inputs >= 2;
  }

  at::Tensor forward(const at::Tensor& input) override {
    c10::IValue out = module_.forward({input});
    if (!out.isTensor()) {
      throw Error(fmt::format("{}: its {} returned a {}, not a tensor; pstrain trains a model whose forward(x) "
                              "returns its outputs as one tensor, or whose forward(x, y) returns its own loss",
                              path_, declared_, out.tagKind()));
    }
    return out.toTensor();
  }

  bool computesOwnLoss() const override { return ownLoss_; }

  OwnLoss forwardWithTargets(const at::Tensor& input, const at::Tensor& target) override {
    try {
      return ownLossOf(module_.forward({input, target}), target, declared_);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", path_, e.what()));
    }
  }

  std::string forwardSignature() const override { return declared_; }
  std::vector<std::pair<std::string, at::Tensor>> frozen() const override { return frozen_; }
  std::vector<std::pair<std::string, std::string>> ties() const override { return ties_; }

  // Moves the frozen weights too (the trained ones and the buffers are the module's).
  void to(torch::Device device, bool nonBlocking) override {
    Net::to(device, nonBlocking);
    torch::NoGradGuard noGrad;
    for (auto& [name, w] : frozen_) w.set_data(w.to(device, nonBlocking));
    for (at::Tensor& b : internal_) b.set_data(b.to(device, nonBlocking));
  }
  using Net::to;

  void train(bool on) override {
    Net::train(on);
    module_.train(on);
  }

  bool saveTorchScript(std::ostream& out) const override {
    module_.save(out);
    return true;
  }

  std::string fileIdentity() const override { return identity_; }
  FlatSpan heldWeights() const override { return held_; }
  const ModelFacts& facts() const override { return facts_; }
  std::vector<std::string> unfilled() const override { return unfilled_; }

  // Reads the storages that loading `file` left unread (`deferred`), but those only of
  // parameters wholly outside `needed`, which then hold no values (heldWeights), as the
  // placeholders outside it do.
  void readStorages(const ModelFile& file, const std::vector<Deferred>& deferred, const FlatSpan& needed) {
    std::set<const void*> outside, used;  // storages of parameters wholly outside `needed`; of every other tensor
    std::int64_t at = 0;
    for (const auto& p : parameters()) {
      const std::int64_t end = at + p.numel();
      (end <= needed.begin || at >= needed.end ? outside : used).insert(p.storage().data_ptr().get());
      at = end;
    }
    for (const auto& b : buffers()) used.insert(b.storage().data_ptr().get());
    for (const Deferred& d : deferred) {
      if (outside.count(d.data) && !used.count(d.data)) {
        held_ = needed;
      } else {
        file.fill(d.at, d.data, d.bytes);
      }
    }
    // Placeholders hold no values: those outside `needed` never will (--init-from reads only
    // the parameters a rank holds), and nothing may copy them.
    if (!unfilled_.empty()) held_ = needed;
  }

 private:
  // Each tensor that the file holds no values for (a placeholder: fewer elements in its
  // storage than it views, as tools/hf_model.py writes a hub model's base) made whole, once
  // for all its names (its TensorImpl is the module's: a tie stays one): in bfloat16 where
  // frozen and modelFilePolicy().halfFrozen, else in its own type. Its memory is untouched
  // (fresh pages) until --init-from reads into it.
  void fillPlaceholders() {
    std::set<const void*> done;
    const auto fill = [&](const std::string& name, const at::Tensor& t, bool frozen) {
      if (t.numel() == 0 || !t.has_storage() || !done.insert(t.unsafeGetTensorImpl()).second) return;
      const std::size_t needs = static_cast<std::size_t>(t.numel()) * t.element_size();
      if (t.storage().nbytes() >= needs && t.is_contiguous()) return;  // holds its values
      const bool half = frozen && modelFilePolicy().halfFrozen && t.scalar_type() == at::kFloat;
      at::Tensor whole = at::empty(t.sizes(), t.options().dtype(half ? at::kBFloat16 : t.scalar_type()));
      torch::NoGradGuard noGrad;
      at::Tensor(t).set_data(whole);
      unfilled_.push_back(name);
    };
    for (const auto& p : module_.named_parameters(/*recurse=*/true)) fill(p.name, p.value, !p.value.requires_grad());
    for (const auto& b : module_.named_buffers(/*recurse=*/true)) fill(b.name, b.value, false);
  }

  // The module that holds `dotted`'s last part, made on the way: "layer1.0.conv1.weight"
  // is "weight" of child "conv1" of child "0" of child "layer1".
  std::pair<torch::nn::Module*, std::string> ownerOf(const std::string& dotted) {
    torch::nn::Module* node = this;
    std::size_t start = 0;
    for (std::size_t dot; (dot = dotted.find('.', start)) != std::string::npos; start = dot + 1) {
      const std::string part = dotted.substr(start, dot - start);
      auto children = node->named_children();
      auto* child = children.find(part);
      node = child ? child->get() : node->register_module(part, std::make_shared<torch::nn::Module>()).get();
    }
    return {node, dotted.substr(start)};
  }

  torch::jit::Module module_;
  std::string path_;
  std::string identity_;
  ModelFacts facts_;
  std::vector<std::string> unfilled_;
  std::string declared_;  // forwardSignature()
  bool ownLoss_ = false;  // its forward takes the targets
  std::vector<std::pair<std::string, at::Tensor>> frozen_;
  std::vector<at::Tensor> internal_;  // the non-persistent buffers
  std::vector<std::pair<std::string, std::string>> ties_;
  FlatSpan held_;
};

}  // namespace

std::shared_ptr<Net> loadScriptModel(const std::string& path, const WeightsNeeded& needed) {
  const ModelFile file(path);
  GuardedModule loaded = loadGuarded(file, path);
  auto net = std::make_shared<ScriptNet>(std::move(loaded.module), path, file.identity(),
                                         std::move(loaded.facts.nonPersistent), std::move(loaded.facts.model));
  net->readStorages(file, loaded.deferred, needed ? needed(*net) : FlatSpan{});
  return net;
}

}  // namespace pstrain::models
