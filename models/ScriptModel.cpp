#include "models/ScriptModel.h"

#include <caffe2/serialize/inline_container.h>
#include <fmt/format.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <functional>
#include <fstream>
#include <set>
#include <sstream>

#include "runtime/Errors.h"

namespace pstrain::models {
namespace {

std::string firstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

[[noreturn]] void refuseUntrusted(const std::string& path, const std::string& op, const std::string& where) {
  throw ConfigError(fmt::format("{}: its code calls {} ({}), which reads or writes files or reaches other machines. "
                                "A model file is a program, like a file for Python's torch.load: use only files you "
                                "trust, and pass --trust-model to run this one",
                                path, op, where));
}

// Before loading: the TorchScript source the archive carries (code/**.py), which the
// loader compiles and whose __setstate__ methods it runs: each operator's calls as the
// source spells them.
void checkSource(caffe2::serialize::PyTorchStreamReader& archive, const std::string& path) {
  static const std::pair<const char*, const char*> kCalls[] = {
      {"torch.save(", "aten::save"},           {"ops.aten.save(", "aten::save"},
      {"torch.from_file(", "aten::from_file"}, {"ops.aten.from_file(", "aten::from_file"},
      {"rpc_sync(", "prim::rpc_sync"},         {"rpc_async(", "prim::rpc_async"},
      {"rpc_remote(", "prim::rpc_remote"},     {"ops.prim.rpc_", "prim::rpc_*"}};
  for (const std::string& record : archive.getAllRecords()) {
    if (record.size() < 3 || record.compare(record.size() - 3, 3, ".py") != 0) continue;
    const auto [data, size] = archive.getRecord(record);
    std::string code(static_cast<const char*>(data.get()), size);
    // Whitespace aside: the compiler reads "torch.save (" as "torch.save(".
    code.erase(std::remove_if(code.begin(), code.end(), [](unsigned char c) { return std::isspace(c); }), code.end());
    for (const auto& [spelling, op] : kCalls) {
      if (code.find(spelling) != std::string::npos) refuseUntrusted(path, op, "in " + record);
    }
  }
}

// After loading: every function compiled from the file (methods of the module and its
// submodules, __setstate__, free functions), blocks included.
void checkGraphs(const torch::jit::Module& module, const std::string& path) {
  std::function<void(torch::jit::Block*, const std::string&)> walk = [&](torch::jit::Block* block,
                                                                          const std::string& function) {
    for (torch::jit::Node* node : block->nodes()) {
      const std::string kind = node->kind().toQualString();
      bool named = false;
      if (const c10::FunctionSchema* schema = node->maybeSchema()) {
        for (const auto& argument : schema->arguments()) named = named || argument.name() == "filename";
      }
      if (named || kind.rfind("prim::rpc_", 0) == 0) refuseUntrusted(path, kind, "in " + function);
      for (torch::jit::Block* inner : node->blocks()) walk(inner, function);
    }
  };
  for (torch::jit::Function* function : module._ivalue()->compilation_unit()->get_functions()) {
    if (function->isGraphFunction()) {
      walk(torch::jit::toGraphFunction(*function).graph()->block(), function->qualname().qualifiedName());
    }
  }
}

// "crc32 1a2b3c4d, 123456 bytes": what the start-up handshake compares across ranks.
std::string identityOf(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chunk(1 << 20);
  uLong crc = crc32(0, nullptr, 0);
  std::uint64_t size = 0;
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    const auto n = static_cast<uInt>(in.gcount());
    crc = crc32(crc, reinterpret_cast<const Bytef*>(chunk.data()), n);
    size += n;
  }
  return fmt::format("crc32 {:08x}, {} bytes", crc, size);
}

class ScriptNet : public Net {
 public:
  ScriptNet(torch::jit::Module module, std::string path)
      : module_(std::move(module)), path_(std::move(path)), identity_(identityOf(path_)) {
    std::set<const void*> seen;  // tied tensors would be bound to two places of the flat buffer
    auto claim = [&](const std::string& name, const at::Tensor& t) {
      if (!seen.insert(t.unsafeGetTensorImpl()).second) {
        throw ConfigError(fmt::format("{}: '{}' is the same tensor as another parameter or buffer (tied "
                                      "weights); pstrain trains each parameter separately: untie them",
                                      path_, name));
      }
    };
    // The module's own tensors, registered (not copied) under the same names: binding them
    // to the flat buffers (set_data) is seen by the TorchScript code that reads them.
    for (const auto& p : module_.named_parameters(/*recurse=*/true)) {
      claim(p.name, p.value);
      auto [owner, leaf] = ownerOf(p.name);
      owner->register_parameter(leaf, p.value, p.value.requires_grad());
    }
    for (const auto& b : module_.named_buffers(/*recurse=*/true)) {
      claim(b.name, b.value);
      auto [owner, leaf] = ownerOf(b.name);
      owner->register_buffer(leaf, b.value);
    }
  }

  at::Tensor forward(const at::Tensor& input) override {
    c10::IValue out = module_.forward({input});
    if (!out.isTensor()) {
      throw Error(fmt::format("{}: forward returned a {}, not a tensor; pstrain trains models whose forward "
                              "returns their outputs as one tensor", path_, out.tagKind()));
    }
    return out.toTensor();
  }

  void train(bool on) override {
    Net::train(on);
    module_.train(on);
  }

  std::string torchScriptArchive() const override {
    std::ostringstream out;
    module_.save(out);
    return out.str();
  }

  std::string fileIdentity() const override { return identity_; }

 private:
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
};

}  // namespace

std::shared_ptr<Net> loadScriptModel(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw ConfigError(fmt::format("--model {}: no such file (a TorchScript file, from "
                                  "torch.jit.script(model).save(FILE); the zoo's names: --list-models)", path));
  }
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> archive;
  try {
    archive = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);  // checks the format version
  } catch (const c10::Error& e) {
    const std::string why = firstLine(e.what_without_backtrace());
    if (why.find("version") != std::string::npos) {
      throw ConfigError(fmt::format("{}: written by a newer PyTorch than this libtorch {} reads ({}); save it with "
                                    "PyTorch {} or older, or build pstrain against a newer libtorch",
                                    path, TORCH_VERSION, why, TORCH_VERSION));
    }
    throw ConfigError(fmt::format("{}: not a TorchScript file (not a PyTorch archive: {}); save the model with "
                                  "torch.jit.script(model).save(\"{}\")", path, why, path));
  }
  if (!trustModelFiles()) checkSource(*archive, path);
  archive.reset();
  torch::jit::setGraphExecutorOptimize(false);
  torch::jit::Module module;
  try {
    module = torch::jit::load(path, torch::kCPU);
  } catch (const c10::Error& e) {
    const std::string why = firstLine(e.what_without_backtrace());
    if (why.find("constants.pkl") != std::string::npos) {
      throw ConfigError(fmt::format("{}: not a TorchScript module but a file of torch.save (a state_dict or a "
                                    "pickled nn.Module holds no code); export the model with "
                                    "torch.jit.script(model).save(\"{}\")", path, path));
    }
    throw ConfigError(fmt::format("{}: this libtorch ({}) cannot load it ({}); a file exported by a newer "
                                  "PyTorch may use operators it lacks: export with PyTorch {} or older, or "
                                  "build pstrain against a newer libtorch", path, TORCH_VERSION, why, TORCH_VERSION));
  }
  if (!module.find_method("forward")) {
    throw ConfigError(fmt::format("{}: the TorchScript module has no forward method", path));
  }
  if (!trustModelFiles()) checkGraphs(module, path);
  return std::make_shared<ScriptNet>(std::move(module), path);
}

bool& trustModelFiles() {
  static bool trusted = false;
  return trusted;
}

}  // namespace pstrain::models
