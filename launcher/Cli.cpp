#include "launcher/Cli.h"

#include <cxxopts.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "data/Dataset.h"
#include "data/Formats.h"
#include "launcher/OptionValues.h"
#include "models/Registry.h"
#include "runtime/Errors.h"
#include "runtime/Portable.h"
#include "runtime/Text.h"
#include "runtime/config/Devices.h"

namespace pstrain::launcher {
namespace {

int envInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value ? std::atoi(value) : fallback;
}

cxxopts::ParseResult parseOrThrow(cxxopts::Options& options, int argc, char** argv) {
  try {
    auto result = options.parse(argc, argv);
    if (!result.unmatched().empty()) {
      throw ConfigError(fmt::format("unexpected argument '{}'", result.unmatched().front()));
    }
    return result;
  } catch (const cxxopts::exceptions::exception& e) {
    throw ConfigError(e.what());
  }
}

}  // namespace

std::string describeVerdicts(const std::vector<std::string>& verdicts, const std::string& prefix,
                             const std::string& suffix) {
  std::string out;
  for (const auto& [message, ranks] : groupIndices(verdicts)) {
    if (message.empty()) continue;  // the ranks without an error
    const std::string who = ranks.size() == verdicts.size()
                                ? ""
                                : fmt::format("{} {}: ", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ", "));
    out += (out.empty() ? "" : "\n") + prefix + who + message + suffix;
  }
  return out;
}

int localRank() { return envInt("OMPI_COMM_WORLD_LOCAL_RANK", 0); }

int launchedRank() { return envInt("OMPI_COMM_WORLD_RANK", 0); }

int launchedSize() { return envInt("OMPI_COMM_WORLD_SIZE", 1); }

int autoThreads() {
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  const int local = portable::ranksOnThisHost();
  return std::max(1, cores / local);
}

TrainCommand parseTrainCommand(int argc, char** argv) {
  TrainCommand command = config::parseTrainFlags(std::vector<std::string>(argv + 1, argv + argc));
  if (!command.helpText.empty()) return command;
  const config::TrainConfig& c = command.cfg;
  // Files (a model or dataset of the user's) are read, and checked against each other, at
  // start-up on every rank; names, and which format a dataset path is, are checked here.
  const data::FormatRow& format = data::formatOf(c.dataset);  // ConfigError: no format reads it
  const bool modelFile = config::isModelFile(c.model), dataFile = !data::namedDataset(c.dataset);
  if (modelFile || dataFile) {
    if (!modelFile) models::modelInfo(c.model);
    if (format.yields == data::Yields::TokenStream && !modelFile) {
      throw ConfigError(fmt::format("--dataset {} is a token file: it takes a sequence model of your own (--model "
                                    "FILE, TorchScript; see the README, \"Language models\"); the zoo's --model {} "
                                    "classifies images", c.dataset, c.model));
    }
    // --loss auto is mse for float targets: a file says which it holds in its labels. (An
    // unreadable one is reported where it is loaded, with the rank that failed.)
    if (c.loss == config::kAuto && modelFile && dataFile && format.yields == data::Yields::Labelled) {
      try {
        if (data::datasetInfo(c.dataset, c.ignoreIndex).classes == 0) command.lossByTargets = "mse";
      } catch (const DataError&) {
      }
    }
    return command;
  }
  const auto& model = models::modelInfo(c.model);  // throws ConfigError listing the names
  const auto dataset = data::datasetInfo(c.dataset);
  if (model.inputShape != dataset.shape) {
    throw ConfigError(fmt::format("--model {} takes {} images but --dataset {} has {} (see --list-models, --list-datasets)",
                                  c.model, fmt::join(model.inputShape, "x"), c.dataset, fmt::join(dataset.shape, "x")));
  }
  return command;
}

namespace {

// pseval's flags, with `d`'s values as their defaults.
cxxopts::Options evalOptions(const EvalCommand& d) {
  cxxopts::Options options(
      "pseval",
      "Evaluates every checkpoint that pstrain publishes in TRAIN_DIR/ckpt, once each, on the\n"
      "test set; appends eval.csv and eval.jsonl in TRAIN_DIR (or --out-dir). The model and\n"
      "dataset are read from the checkpoint. TRAIN_DIR is only read: a shared directory that\n"
      "this user cannot write needs --out-dir. --export FILE writes a checkpoint's weights for\n"
      "PyTorch, Hugging Face or MLX instead. Exit status: 0 every checkpoint evaluated, 3 some\n"
      "skipped (each named), 2 bad flags or input (a model file refused, data that does not fit\n"
      "the model), 1 any other error.\n");
  options.set_width(100);
  // clang-format off
  options.add_options()
    ("train-dir", "the run's directory (required)", cxxopts::value<std::string>())
    ("out-dir", "where eval.csv, eval.jsonl, the TensorBoard event file and plots/ go (default: TRAIN_DIR); "
                "created if missing", defaulted(d.outDir))
    ("follow", "keep waiting for new checkpoints until trained_model.pt appears")
    ("data-dir", "dataset folder (default: the dataset's folder in $PSTRAIN_DATA_DIR, else in /usr/share/datasets)", defaulted(d.dataDir))
    ("model", "the model file (TorchScript) of checkpoints trained from one: pseval runs a model file only when "
              "named here, never from the path a checkpoint records", defaulted(d.model))
    ("trust-model", "run a model file whose code reads or writes files or reaches other machines (refused otherwise)")
    ("device", config::deviceNames() + " (auto: MPS, else CUDA, else CPU)", defaulted(d.device))
    ("poll-seconds", "with --follow: seconds between looks", defaulted(d.pollSeconds))
    ("idle-timeout", "with --follow: give up after this many seconds without a new checkpoint", defaulted(d.idleTimeoutSeconds))
    ("retry-for", "a checkpoint that fails its checks is read again 1, 2, 4 ... s later for this many seconds "
                  "before it is skipped (a shared file system's caches can show a new file incomplete)",
     defaulted(d.retrySeconds))
    ("batch-size", "evaluation batch size", defaulted(d.batchSize))
    ("eval-windows", "a token file's val split: evaluate this many windows of --block-size, spread evenly over "
                     "the file (the first at offset 0, the last ending at its end); 0: all its non-overlapping windows",
     defaulted(d.evalWindows))
    ("threads", "intra-op threads (0: all cores)", defaulted(d.threads))
    ("tensorboard", "on | off: each checkpoint's test loss, accuracy (and perplexity) also into a TensorBoard "
                    "event file in TRAIN_DIR (or --out-dir)", cxxopts::value<std::string>()->default_value("on"))
    ("plot", "when done, render plots/*.png in TRAIN_DIR (or --out-dir) with tools/plot (needs gnuplot)")
    ("predictions", "write the predicted class of every test sample (last checkpoint evaluated) to this file", defaulted(d.predictionsPath))
    ("export", "instead of evaluating: write the newest published checkpoint's weights (or --step N's) to FILE, "
               "by the model's state_dict names: FILE.safetensors by that format's spec (each tie once, its other "
               "names in __metadata__: what mlx.core.load and safetensors' load_file read), else a state dict "
               "(torch.load, load_state_dict); written whole or not at all", defaulted(d.exportPath))
    ("step", "with --export: the checkpoint of this step (default: the newest)", cxxopts::value<std::int64_t>())
    ("format", "with --export DIR: hf (a hub folder: the adapters merged into the base, W + alpha/r B A, in the "
               "hub's names, sharded past 5 GB, with the config and tokenizer of --init-from's folder: "
               "from_pretrained(DIR), mlx_lm.load(DIR)), peft (adapter_model.safetensors and adapter_config.json: "
               "PeftModel.from_pretrained) or mlx (adapters.safetensors and adapter_config.json: mlx_lm.generate "
               "--adapter-path DIR); a model of tools/hf_model.py's", cxxopts::value<std::string>())
    ("h,help", "print this help");
  // clang-format on
  return options;
}

// Throws ConfigError naming the flag whose value `command` cannot use.
void checkEvalCommand(const EvalCommand& command) {
  config::deviceInfo(command.device);
  if (command.batchSize <= 0 || command.batchSize > 1'000'000) throw ConfigError("--batch-size must be in [1, 1000000]");
  if (command.evalWindows < 0) throw ConfigError("--eval-windows must be 0 (all) or a positive number of windows");
  if (command.threads < 0 || command.threads > 1024) throw ConfigError("--threads must be 0 (all cores) or up to 1024");
  for (auto [flag, value] : {std::pair<const char*, double>{"--poll-seconds", command.pollSeconds},
                             {"--idle-timeout", command.idleTimeoutSeconds}}) {
    if (!(std::isfinite(value) && value > 0 && value <= config::kMaxSeconds)) {
      throw ConfigError(fmt::format("{} must be a positive number of seconds up to {} (got {})", flag,
                                    config::kMaxSeconds, value));
    }
  }
  if (!(std::isfinite(command.retrySeconds) && command.retrySeconds >= 0 && command.retrySeconds <= config::kMaxSeconds)) {
    throw ConfigError(fmt::format("--retry-for must be 0 (no second look) or seconds up to {} (got {})",
                                  config::kMaxSeconds, command.retrySeconds));
  }
}

}  // namespace

EvalCommand parseEvalCommand(int argc, char** argv) {
  cxxopts::Options options = evalOptions(EvalCommand());
  EvalCommand command;
  auto r = parseOrThrow(options, argc, argv);
  if (r.count("help")) {
    command.helpText = options.help();
    return command;
  }
  try {
    if (!r.count("train-dir")) throw ConfigError("--train-dir is required");
    command.trainDir = r["train-dir"].as<std::string>();
    command.outDir = r["out-dir"].as<std::string>();
    if (command.outDir.empty()) command.outDir = command.trainDir;
    command.retrySeconds = r["retry-for"].as<double>();
    command.follow = r.count("follow") > 0;
    command.dataDir = r["data-dir"].as<std::string>();
    command.model = r["model"].as<std::string>();
    command.device = r["device"].as<std::string>();
    command.pollSeconds = r["poll-seconds"].as<double>();
    command.idleTimeoutSeconds = r["idle-timeout"].as<double>();
    command.batchSize = r["batch-size"].as<std::int64_t>();
    command.evalWindows = r["eval-windows"].as<std::int64_t>();
    command.threads = r["threads"].as<int>();
    command.predictionsPath = r["predictions"].as<std::string>();
    command.exportPath = r["export"].as<std::string>();
    if (r.count("format")) {
      if (command.exportPath.empty()) throw ConfigError("--format says what --export writes");
      command.exportFormat = r["format"].as<std::string>();
      if (command.exportFormat != "hf" && command.exportFormat != "peft" && command.exportFormat != "mlx") {
        throw ConfigError(fmt::format("--format {}: hf, peft or mlx", command.exportFormat));
      }
    }
    if (r.count("step")) {
      if (command.exportPath.empty()) throw ConfigError("--step chooses what --export writes");
      command.exportStep = r["step"].as<std::int64_t>();
      if (command.exportStep < 0) throw ConfigError("--step must be a step of the run (0 or more)");
    }
    command.plot = r.count("plot") > 0;
    command.trustModel = r.count("trust-model") > 0;
    command.tensorboard = config::parseOnOff("tensorboard", r["tensorboard"].as<std::string>()) == config::OnOff::On;
  } catch (const cxxopts::exceptions::exception& e) {
    throw ConfigError(e.what());
  }
  checkEvalCommand(command);
  return command;
}

}  // namespace pstrain::launcher
