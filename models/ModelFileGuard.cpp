#include "models/ModelFileGuard.h"

#include <caffe2/serialize/inline_container.h>
#include <fmt/format.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/csrc/jit/runtime/jit_exception.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/csrc/jit/serialization/import_source.h>
#include <torch/script.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <csignal>
#include <chrono>
#include <mutex>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "models/ImageReader.h"
#include "models/ModelFile.h"
#include "runtime/Errors.h"
#include "runtime/Portable.h"
#include "runtime/Process.h"
#include "runtime/Text.h"
#include "runtime/checkpoint/BytesReader.h"
#include "runtime/zip/ArchiveCheck.h"
#include "runtime/zip/Json.h"

#include "models/ScriptModel.h"

namespace pstrain::models {
namespace {


constexpr const char* kCheckModelFlag = "--check-model";
// The check process's: the file is its standard input (the descriptor the loader opened).
constexpr const char* kFileOnStdin = "--stdin";
// The check process's: the pid of the process that started it, whose end ends it.
constexpr const char* kParentFlag = "--parent";
constexpr int kRefused = 2;  // the check process's status for a refused file (its reason on stdout)

// The first line that says something (the TorchScript compiler's reports start with one
// that is empty), safe to print.
std::string firstLine(const std::string& text) {
  const std::size_t start = std::min(text.find_first_not_of(" \n"), text.size());
  return printable(text.substr(start, text.find('\n', start) - start));
}

// The last line that says something, safe to print.
std::string lastLine(const std::string& text) {
  const std::size_t end = text.find_last_not_of(" \n");
  if (end == std::string::npos) return "";
  const std::size_t start = text.rfind('\n', end);
  return printable(text.substr(start == std::string::npos ? 0 : start + 1, end + 1 - (start == std::string::npos ? 0 : start + 1)));
}

// Where the TorchScript interpreter's report `text` says its code failed: ", in __setstate__
// (code/__torch__.py, line 20)" from its last frame's "  File "code/__torch__.py", line 20,
// in __setstate__"; "" when it names none.
std::string failedFrame(const std::string& text) {
  const std::size_t frame = text.rfind("  File \"");
  if (frame == std::string::npos) return "";
  const std::string line = text.substr(frame + 8, text.find('\n', frame) - frame - 8);
  const std::size_t quote = line.find('"'), in = line.rfind(", in ");
  if (quote == std::string::npos || in == std::string::npos || in < quote) return "";
  const std::string where = line.substr(0, quote) + line.substr(quote + 1, in - quote - 1);
  return printable(fmt::format(", in {} ({})", line.substr(in + 5), where));
}

// What a load of `path` that threw `e` (torch::jit::load's c10::Error, the TorchScript
// compiler's ErrorReport, or what the file's own code raised) says to its user.
std::string loadFailure(const std::exception& e, const std::string& path) {
  const std::string what = e.what();
  if (firstLine(what).find("constants.pkl") != std::string::npos) {
    return fmt::format("{}: not a TorchScript module but a file of torch.save (a state_dict or a pickled nn.Module "
                       "holds no code); export the model with torch.jit.script(model).save(\"{}\")", path, path);
  }
  // Its own code ran (a __setstate__) and raised, or an operator it called failed.
  if (dynamic_cast<const torch::jit::JITException*>(&e) ||
      what.find("The following operation failed in the TorchScript interpreter") != std::string::npos) {
    return fmt::format("{}: loading it ran its code, which failed{}: {}; the model's own code (its __setstate__) "
                       "fails as it is: fix it and export the model again", path, failedFrame(what), lastLine(what));
  }
  return fmt::format("{}: this libtorch ({}) cannot load it ({}); a file exported by a newer PyTorch may use "
                     "operators it lacks: export with PyTorch {} or older, or build pstrain against a newer libtorch",
                     path, TORCH_VERSION, firstLine(what), TORCH_VERSION);
}

[[noreturn]] void refuseUntrusted(const std::string& path, const std::string& op, const std::string& where) {
  throw ConfigError(fmt::format("{}: its code calls {} ({}), which reads or writes files or reaches other machines. "
                                "A model file is a program, like a file for Python's torch.load: use only files you "
                                "trust, and pass --trust-model to run this one",
                                path, printable(op), printable(where)));
}

// Every graph of `function` and below: its blocks and its subgraph attributes (the body
// of a prim::fork, of a fusion group ...), each node to `check`.
void walkGraph(torch::jit::Block* block, const std::function<void(torch::jit::Node*)>& check) {
  for (torch::jit::Node* node : block->nodes()) {
    check(node);
    for (torch::jit::Block* inner : node->blocks()) walkGraph(inner, check);
    for (const torch::jit::Symbol& name : node->attributeNames()) {
      if (node->kindOf(name) == torch::jit::AttributeKind::g) walkGraph(node->g(name)->block(), check);
      if (node->kindOf(name) == torch::jit::AttributeKind::gs) {
        for (const auto& graph : node->gs(name)) walkGraph(graph->block(), check);
      }
    }
  }
}

// Refuses, unless trusted, a file whose compiled code calls an operator that reads or
// writes files (an argument named "filename": aten::save, aten::from_file) or reaches other
// machines (prim::rpc_*): every function of `unit` (the classes' methods, __setstate__ and
// hooks among them).
void checkGraphs(const torch::jit::CompilationUnit& unit, const std::string& path) {
  for (torch::jit::Function* function : unit.get_functions()) {
    if (!function || !function->isGraphFunction()) continue;
    const std::string where = "in " + function->qualname().qualifiedName();
    walkGraph(torch::jit::toGraphFunction(*function).graph()->block(), [&](torch::jit::Node* node) {
      const std::string kind = node->kind().toQualString();
      bool named = false;
      if (const c10::FunctionSchema* schema = node->maybeSchema()) {
        for (const auto& argument : schema->arguments()) named = named || argument.name() == "filename";
      }
      if (named || kind.rfind("prim::rpc_", 0) == 0) refuseUntrusted(path, kind, where);
    });
  }
}

// The globals that libtorch's unpickler makes itself (Unpickler::readGlobal), running no code
// of the file: tensors and their storages, typed lists, complex numbers, devices.
bool libtorchMakes(const zip::PickleGlobal& global) {
  if (global.module == "torch") return true;  // storage types, quantization schemes, torch.device (else an error)
  static const std::set<std::pair<std::string, std::string>> kOwn = {
      {"torch._utils", "_rebuild_tensor_v2"},    {"torch._utils", "_rebuild_qtensor"},
      {"torch._utils", "_rebuild_sparse_tensor"}, {"torch.jit._pickle", "build_tensor_from_id"},
      {"torch.jit._pickle", "restore_type_tag"}, {"torch.jit._pickle", "build_intlist"},
      {"torch.jit._pickle", "build_tensorlist"}, {"torch.jit._pickle", "build_doublelist"},
      {"torch.jit._pickle", "build_boollist"},   {"builtins", "complex"},
      {"collections", "OrderedDict"},            {"__main__", "TensorID"},
      {"__main__", "IntList"}};
  return kOwn.count({global.module, global.name}) > 0;
}

// Before anything of the file runs: every class that data.pkl names, whatever its namespace,
// compiled from the file's code (code/**.py) as torch::jit::load would compile it, into a
// compilation unit of its own, without unpickling the module (which runs __setstate__); any
// other name is one of libtorch's own (libtorchMakes) or the file is refused. Its constants
// must be tensors: their pickle names nothing but libtorch's own. Then the graphs are
// checked: what the checks see is what libtorch would execute, whatever the source's
// spelling (line continuations, comments, a forked body).
void checkBeforeLoading(caffe2::serialize::PyTorchStreamReader& archive, const zip::ArchiveContents& contents,
                        const std::string& path) {
  auto pickle = [&](const std::string& name) {
    const auto [data, size] = archive.getRecord(name);
    return std::string(static_cast<const char*>(data.get()), size);
  };
  const auto named = [&](const char* pickleName) {
    const auto found = contents.pickles.find(pickleName);
    return found == contents.pickles.end() ? std::vector<zip::PickleGlobal>() : found->second.globals();
  };
  std::vector<c10::IValue> constants;
  for (const zip::PickleGlobal& global : named("constants")) {
    if (!libtorchMakes(global)) {
      refuseUntrusted(path, "an object of class " + global.qualified(), "among its constants, which loading makes");
    }
  }
  if (archive.hasRecord("constants.pkl")) {
    const auto noObjects = [&](const c10::QualifiedName& name) -> c10::StrongTypePtr {
      refuseUntrusted(path, "an object of class " + name.qualifiedName(), "among its constants");
    };
    const auto noLoading = [&](const at::StrongTypePtr&, const c10::IValue&) -> c10::intrusive_ptr<c10::ivalue::Object> {
      refuseUntrusted(path, "an object", "among its constants");
    };
    const c10::IValue table = torch::jit::readArchiveAndTensors("constants", "", "", noObjects, noLoading,
                                                                c10::Device(c10::kCPU), archive);
    for (const c10::IValue& constant : table.toTupleRef().elements()) constants.push_back(constant);
  }
  auto unit = std::make_shared<torch::jit::CompilationUnit>();
  const torch::jit::SourceImporter importer(
      unit, &constants,
      [&](const std::string& qualifier) -> std::shared_ptr<torch::jit::Source> {
        std::string file = "code/" + qualifier + ".py";
        std::replace(file.begin() + 5, file.end() - 3, '.', '/');
        if (!archive.hasRecord(file)) return nullptr;
        return std::make_shared<torch::jit::Source>(pickle(file), file, 1);
      },
      archive.version());
  for (const zip::PickleGlobal& global : named("data")) {
    if (libtorchMakes(global)) continue;
    c10::TypePtr type;
    std::string why;
    try {
      type = importer.loadType(c10::QualifiedName(global.module, global.name));
    } catch (const std::exception& e) {
      why = " (" + firstLine(e.what()) + ")";
    }
    // What the loader would make an object of: a class (or enum) of exactly that name.
    if (!type || !(type->cast<c10::ClassType>() || type->cast<c10::EnumType>()) || type->str() != global.qualified()) {
      throw ConfigError(fmt::format("{}: its data names '{}', which is neither one of libtorch's own nor a class "
                                    "that its code defines{}; a damaged or crafted file: export the model again "
                                    "with torch.jit.script(model).save(\"{}\")",
                                    path, printable(global.qualified()), why, path));
    }
  }
  checkGraphs(*unit, path);
}

// The file's image is a PyTorch archive this libtorch reads, sound as zip/ArchiveCheck.h
// checks it (storages the size of their records, tensors within them, no compressed record:
// no zip bomb), whose large storages are storages (ModelFile::confirmStorages) and, unless
// trusted, passes checkBeforeLoading, in this process: the check process's work, and the
// loader's own.
// What the file says of itself (kFactsRecord): {"non_persistent_buffers": [NAME, ...],
// "hf": {"base_model_prefix": PREFIX, "ignore_unexpected": [NAME, ...], ...}, ...}; nothing
// without that record. ConfigError for facts that are not that.
FileFacts factsOf(const ModelFile& file, const zip::ArchiveContents& contents, const std::string& path) {
  const auto record = contents.stored.find(lowerCase(contents.root) + "/" + kFactsRecord);
  if (record == contents.stored.end()) return {};
  const zip::Span span = record->second;
  const auto bad = [&](const std::string& what) {
    throw ConfigError(fmt::format("{}: its {} {}; save the model again with tools/model_file.py", path, kFactsRecord,
                                  printable(what)));
  };
  if (span.end - span.begin > (std::uint64_t(64) << 20)) bad("is larger than any facts of a model");
  FileFacts out;
  out.model.json = std::string(file.image().substr(static_cast<std::size_t>(span.begin), static_cast<std::size_t>(span.end - span.begin)));
  const zip::JsonValue facts = zip::parseJson(out.model.json, bad);
  if (facts.kind != zip::JsonValue::Kind::Object) bad("is not a JSON object");
  const auto names = [&](const zip::JsonValue* list, const char* what) {
    std::vector<std::string> found;
    if (!list) return found;
    if (list->kind != zip::JsonValue::Kind::Array) bad(fmt::format("'{}' is not a list of names", what));
    for (const zip::JsonValue& name : list->items) {
      if (name.kind != zip::JsonValue::Kind::String) bad(fmt::format("'{}' holds other than a name", what));
      found.push_back(name.text);
    }
    return found;
  };
  for (std::string& name : names(facts.member("non_persistent_buffers"), "non_persistent_buffers")) {
    out.nonPersistent.insert(std::move(name));
  }
  if (const zip::JsonValue* hf = facts.member("hf")) {
    if (hf->kind != zip::JsonValue::Kind::Object) bad("'hf' is not an object");
    if (const zip::JsonValue* prefix = hf->member("base_model_prefix")) {
      if (prefix->kind != zip::JsonValue::Kind::String) bad("'hf.base_model_prefix' is not a name");
      out.model.basePrefix = prefix->text;
    }
    out.model.ignored = names(hf->member("ignore_unexpected"), "hf.ignore_unexpected");
  }
  return out;
}

// The image's archive checked; returns the file's facts.
FileFacts checkArchive(const ModelFile& file, const std::string& path) {
  const std::string_view bytes = file.image();
  const zip::ArchiveContents contents =
      zip::checkArchive(bytes, zip::ArchiveKind::ModelFile, [&](const std::string& what) {
        throw ConfigError(fmt::format("{}: not a TorchScript file pstrain reads (not a sound PyTorch archive: {}); "
                                      "save the model with torch.jit.script(model).save(\"{}\")", path,
                                      printable(what), path));
      });
  file.confirmStorages(contents.storages);
  FileFacts facts = factsOf(file, contents, path);
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> archive;
  try {  // checks the format version
    archive = std::make_unique<caffe2::serialize::PyTorchStreamReader>(std::make_shared<checkpoint::BytesReader>(bytes));
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
  if (modelFilePolicy().trusted) return facts;
  try {
    checkBeforeLoading(*archive, contents, path);
  } catch (const Error&) {
    throw;  // the check's own refusal
  } catch (const std::exception& e) {  // a record it cannot give, code its compiler rejects
    throw ConfigError(fmt::format("{}: a damaged TorchScript archive ({}); export the model again with "
                                  "torch.jit.script(model).save(\"{}\")", path, firstLine(e.what()), path));
  }
  return facts;
}

// checkArchive in the check process, for an untrusted `file` (its descriptor as the process's
// standard input): a crash of libtorch's compiler there is this file's refusal, not this
// process's end.
void checkArchiveApart(const ModelFile& file, const std::string& path) {
  std::vector<std::string> argv = modelCheckCommand();
  argv.insert(argv.end(), {path, kFileOnStdin, kParentFlag, std::to_string(::getpid())});
  const double seconds = modelFilePolicy().seconds;
  const process::CommandResult check = process::runCommand(
      argv, std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000)), /*captureOutput=*/true, {},
      file.descriptor());
  std::string said = check.output;
  while (!said.empty() && std::isspace(static_cast<unsigned char>(said.back()))) said.pop_back();
  if (check.exitCode == 0) return;
  if (check.exitCode == kRefused && !said.empty()) throw ConfigError(said);
  if (check.timedOut) {
    throw ConfigError(fmt::format("{}: checking and loading it in the process that checks model files took more than "
                                  "{:g} s (--timeout), so that process was stopped: its code may never end (a "
                                  "__setstate__ that loops); a damaged or hostile file", path, seconds));
  }
  if (check.exitCode == 127 || check.exitCode < 0) {
    throw Error(fmt::format("{}: could not start the process that checks model files ({})", path, argv.front()));
  }
  if (check.exitCode == 128 + SIGSYS) {
    throw ConfigError(fmt::format("{}: loading it in a sandbox, its code tried to write a file, open a socket or run a "
                                  "program (the process that checks model files was stopped): a hostile file, or pass "
                                  "--trust-model if you trust it", path));
  }
  const std::string how = check.exitCode > 128 ? fmt::format("died of signal {} ({})", check.exitCode - 128,
                                                             ::strsignal(check.exitCode - 128))
                                               : fmt::format("ended with status {}", check.exitCode);
  throw ConfigError(fmt::format("{}: libtorch {}'s TorchScript compiler {} on its code (in the process that checks "
                                "model files, so nothing else was harmed): a damaged or hostile file; export the "
                                "model again with torch.jit.script(model).save(\"{}\")",
                                path, TORCH_VERSION, how, path));
}

// The check process's: a thread that ends this process as soon as `parent` is no longer its
// parent (it ended, however: even SIGKILL), so that a check never outlives the rank that
// asked for it. Polled: the one way that works alike on Linux and macOS without the
// parent's help.
void endWithParent(pid_t parent) {
  std::thread([parent] {
    while (::getppid() == parent) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::_Exit(kRefused);
  }).detach();
}

bool definesSetState(const torch::jit::Module& module) {
  for (const torch::jit::Function* function : module._ivalue()->compilation_unit()->get_functions()) {
    if (function->name() == "__setstate__") return true;
  }
  return false;
}

// The module of `file`, its large storages unread (each in `deferred`), unless the file's
// code defines a __setstate__: loading runs it on whatever was read, so then the module is
// loaded again with everything read (and `deferred` is empty). Throws what torch::jit::load
// throws.
torch::jit::Module loadModule(const ModelFile& file, std::vector<Deferred>& deferred) {
  auto reader = std::make_shared<ImageReader>(file, /*defer=*/true);
  torch::jit::Module module = torch::jit::load(reader, torch::kCPU);
  deferred = reader->takeDeferred();
  if (deferred.empty() || !definesSetState(module)) return module;
  deferred.clear();
  module = torch::jit::Module();  // the first load's memory goes before the second's comes
  return torch::jit::load(std::make_shared<ImageReader>(file, /*defer=*/false), torch::kCPU);
}

// Defence in depth, in the check process once the checks passed: the file loaded as the
// loader will load it (the same image through the same reader), running its __setstate__
// methods, in a process that may no longer write a file, open a socket or run a program
// (Portable.h): code that the checks missed and that tries any of it kills the process
// (SIGSYS), which refuses the file. Any other failure of the load refuses it too, with what
// the loader would say (loadFailure): code that fails here must not run on where it would
// not (a file that exists in one process and not in the other). Where the system has no
// such sandbox (macOS), there is no trial load.
// Like the loader, it reads no large storage unless the file's code has a __setstate__
// (loadModule): the check process's peak is the file's code, not its weights.
// Returns the refusal, "" if none.
std::string trialLoad(const ModelFile& file, const std::string& path) {
  std::fflush(stdout);
  if (!portable::forbidWritesSocketsAndPrograms()) return "";
  try {
    torch::jit::setGraphExecutorOptimize(false);
    std::vector<Deferred> deferred;
    loadModule(file, deferred);
  } catch (const Error& e) {  // ModelFile's own refusal
    return e.what();
  } catch (const std::exception& e) {
    return loadFailure(e, path);
  }
  return "";
}

// `load()`, which must end within modelFilePolicy().seconds: past that, a watchdog thread
// calls onStuckLoad (or says so and exits 2), since nothing can stop the file's code.
template <typename Load>
auto withinLoadLimit(const std::string& path, Load load) {
  const ModelFilePolicy& policy = modelFilePolicy();
  std::mutex mutex;
  std::condition_variable changed;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(mutex);
    if (changed.wait_for(lock, std::chrono::duration<double>(policy.seconds), [&] { return done; })) return;
    const std::string message = fmt::format(
        "{}: loading it (running its code: a __setstate__) took more than {:g} s (--timeout); its code may never "
        "end: a damaged or hostile file", path, policy.seconds);
    if (policy.onStuckLoad) policy.onStuckLoad(message);
    std::fprintf(stderr, "%s\n", message.c_str());
    std::_Exit(kRefused);
  });
  const auto finish = [&] {
    {
      std::lock_guard<std::mutex> lock(mutex);
      done = true;
    }
    changed.notify_all();
    watchdog.join();
  };
  try {
    auto result = load();
    finish();
    return result;
  } catch (...) {
    finish();
    throw;
  }
}

}  // namespace

GuardedModule loadGuarded(const ModelFile& file, const std::string& path) {
  const bool trusted = modelFilePolicy().trusted;
  if (!trusted && !modelCheckCommand().empty()) checkArchiveApart(file, path);
  GuardedModule out;
  out.facts = checkArchive(file, path);
  torch::jit::setGraphExecutorOptimize(false);
  try {
    out.module = withinLoadLimit(path, [&] { return loadModule(file, out.deferred); });
  } catch (const Error&) {
    throw;  // ModelFile's own refusal
  } catch (const std::exception& e) {  // c10::Error, the TorchScript compiler's ErrorReport, the file's own code's
    throw ConfigError(loadFailure(e, path));
  }
  if (!out.module.find_method("forward")) {
    throw ConfigError(fmt::format("{}: the TorchScript module has no forward method", path));
  }
  // And what loading made, against whatever the compile above did not reach.
  if (!trusted) checkGraphs(*out.module._ivalue()->compilation_unit(), path);
  return out;
}

ModelFilePolicy& modelFilePolicy() {
  static ModelFilePolicy policy;
  return policy;
}

std::vector<std::string>& modelCheckCommand() {
  static std::vector<std::string> command;
  return command;
}

std::optional<int> serveModelCheck(int argc, char** argv) {
  const bool onStdin = argc == 6 && std::string(argv[3]) == kFileOnStdin && std::string(argv[4]) == kParentFlag;
  if ((argc == 3 || onStdin) && std::string(argv[1]) == kCheckModelFlag) {
    if (onStdin) endWithParent(static_cast<pid_t>(std::atoll(argv[5])));
    std::unique_ptr<ModelFile> file;
    std::string refusal;
    try {
      file = onStdin ? std::make_unique<ModelFile>(STDIN_FILENO, argv[2]) : std::make_unique<ModelFile>(argv[2]);
      checkArchive(*file, argv[2]);
      refusal = trialLoad(*file, argv[2]);
    } catch (const Error& e) {
      refusal = e.what();
    }
    if (refusal.empty()) return 0;
    std::printf("%s\n", refusal.c_str());
    return kRefused;
  }
  const std::string self = portable::executablePath();
  if (!self.empty()) modelCheckCommand() = {self, kCheckModelFlag};
  return std::nullopt;
}
}  // namespace pstrain::models
