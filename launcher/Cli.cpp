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
#include "models/Registry.h"
#include "runtime/codec/Codec.h"
#include "runtime/Errors.h"

namespace pstrain::launcher {
namespace {

int envInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value ? std::atoi(value) : fallback;
}

// The flag whose value is `value` in argv ("--flag value" or "--flag=value"), for errors
// that name the value only; empty if none.
std::string flagOfValue(int argc, char** argv, const std::string& value) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos && arg.substr(eq + 1) == value) return arg.substr(0, eq);
    if (arg == value && i > 1 && std::string(argv[i - 1]).rfind("--", 0) == 0) return argv[i - 1];
  }
  return "";
}

cxxopts::ParseResult parseOrThrow(cxxopts::Options& options, int argc, char** argv) {
  try {
    auto result = options.parse(argc, argv);
    if (!result.unmatched().empty()) {
      throw ConfigError(fmt::format("unexpected argument '{}'", result.unmatched().front()));
    }
    return result;
  } catch (const cxxopts::exceptions::incorrect_argument_type& e) {
    // cxxopts names the value ("Argument 'inf' failed to parse"): name the flag too.
    const std::string what = e.what();
    const auto open = what.find("\u2018"), close = what.find("\u2019");
    const std::string value = open != std::string::npos && close != std::string::npos
                                  ? what.substr(open + 3, close - open - 3) : "";
    const std::string flag = flagOfValue(argc, argv, value);
    throw ConfigError(flag.empty() ? what : fmt::format("{} {}: not a number in range (a finite number is needed)", flag, value));
  } catch (const cxxopts::exceptions::exception& e) {
    throw ConfigError(e.what());
  }
}

// Calls body(argc, argv) with a mutable argv made from `args`.
template <typename Body>
void withArgv(const std::vector<std::string>& args, Body&& body) {
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  body(static_cast<int>(argv.size()), argv.data());
}

std::string trim(const std::string& s) {
  auto first = s.find_first_not_of(" \t\r");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t\r") - first + 1);
}

}  // namespace

std::vector<std::string> configFileArguments(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("{}: cannot read the config file", path));
  std::vector<std::string> args;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    auto eq = line.find('=');
    std::string key = trim(line.substr(0, eq));
    if (eq == std::string::npos || key.empty() || key.rfind("-", 0) == 0) {
      throw ConfigError(fmt::format("{}:{}: expected 'key = value' (keys are flag names without --), got '{}'",
                                    path, number, line));
    }
    if (key == "config") throw ConfigError(fmt::format("{}:{}: a config file cannot name another", path, number));
    args.push_back("--" + key + "=" + trim(line.substr(eq + 1)));
  }
  return args;
}

std::string describeVerdicts(const std::vector<std::string>& verdicts, const std::string& prefix,
                             const std::string& suffix) {
  std::vector<std::pair<std::string, std::vector<std::size_t>>> distinct;  // message, its ranks
  for (std::size_t r = 0; r < verdicts.size(); ++r) {
    if (verdicts[r].empty()) continue;
    auto it = std::find_if(distinct.begin(), distinct.end(), [&](const auto& d) { return d.first == verdicts[r]; });
    if (it == distinct.end()) it = distinct.insert(distinct.end(), {verdicts[r], {}});
    it->second.push_back(r);
  }
  std::string out;
  for (const auto& [message, ranks] : distinct) {
    const std::string who = ranks.size() == verdicts.size()
                                ? ""
                                : fmt::format("{} {}: ", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ", "));
    out += (out.empty() ? "" : "\n") + prefix + who + message + suffix;
  }
  return out;
}

int localRank() { return envInt("OMPI_COMM_WORLD_LOCAL_RANK", 0); }

int launchedRank() { return envInt("OMPI_COMM_WORLD_RANK", 0); }

int autoThreads() {
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  int local = std::max(1, envInt("OMPI_COMM_WORLD_LOCAL_SIZE", 1));
  return std::max(1, cores / local);
}

TrainCommand parseTrainCommand(int argc, char** argv) {
  config::TrainConfig d;  // defaults
  cxxopts::Options options(
      "pstrain",
      "Data-parallel training with a parameter server. Launch with Open MPI:\n"
      "  mpirun -np 3 pstrain --model lenet --epochs 2      (rank 0 server + 2 workers)\n"
      "  mpirun --hostfile hostfiles/localhost -np 3 pstrain ...\n"
      "Rank 0 keeps the weights and applies the averaged gradients; ranks 1..N train on disjoint\n"
      "shards of the data. Checkpoints go to TRAIN_DIR/ckpt for pseval.\n");
  options.set_width(100);
  auto str = [](const std::string& v) { return cxxopts::value<std::string>()->default_value(v); };
  auto i64 = [](std::int64_t v) { return cxxopts::value<std::int64_t>()->default_value(std::to_string(v)); };
  auto dbl = [](double v) { return cxxopts::value<double>()->default_value(config::canonicalNumber(v)); };
  auto flag = [] { return cxxopts::value<bool>()->default_value("false"); };
  // clang-format off
  options.add_options("Model and data")
    ("model", "model: mlp, convnet, lenet, resnet20..110, resnet18..152, vgg11..19 (see --list-models), or a TorchScript file of your own (a path, or a name ending in .pt/.pth)", str(d.model))
    ("dataset", "dataset: fashion-mnist, mnist, cifar10, cifar100, synthetic, synthetic-cifar (see --list-datasets), or a NumPy .npz file (x_train, y_train, x_test, y_test)", str(d.dataset))
    ("loss", "auto | cross-entropy (on logits) | nll (on log-probabilities) | mse (float targets); auto: nll for the zoo, cross-entropy for a model file", str(d.loss))
    ("data-dir", "dataset folder (default: the dataset's folder in $PSTRAIN_DATA_DIR, else in /usr/share/datasets; see --list-datasets)", str(d.dataDir))
    ("synthetic-size", "training samples of the synthetic datasets", i64(d.syntheticSize))
    ("list-models", "print the models and exit")
    ("list-datasets", "print the datasets and exit");
  options.add_options("Optimization")
    ("batch-size", "samples per worker (per virtual shard) per step", i64(d.batchSize))
    ("virtual-shards", "sync, allreduce: deal each step's global batch to V virtual shards of --batch-size, whoever computes them, so that the result does not depend on how many workers there are (0: the first launch's workers; --resume keeps the run's)", cxxopts::value<int>()->default_value(std::to_string(d.virtualShards)))
    ("reshard", "--resume may change the virtual shards or the batch size (the data order, global batch and lr change)", flag())
    ("balance", "sync: deal each step's virtual shards to the workers in proportion to their measured speed (same weights; hosts of different speeds finish together)", flag())
    ("lr", "base learning rate (one worker)", dbl(d.lr))
    ("lr-scaling", "none | linear (lr x workers: the Linear Scaling Rule)", str(d.lrScaling))
    ("warmup-steps", "ramp the lr linearly up to its target over this many steps", i64(d.warmupSteps))
    ("lr-decay", "none | cosine (after warm-up, half a cosine down to 0 at the last step)", str(d.lrDecay))
    ("momentum", "SGD momentum (torch.optim.SGD semantics)", dbl(d.momentum))
    ("nesterov", "Nesterov momentum", flag())
    ("weight-decay", "L2 penalty added to the gradient", dbl(d.weightDecay))
    ("steps", "optimizer steps (overrides --epochs when > 0)", i64(d.steps))
    ("epochs", "passes over the training set", i64(d.epochs))
    ("seed", "seed of weights and data order", cxxopts::value<std::uint64_t>()->default_value(std::to_string(d.seed)));
  options.add_options("Modes")
    ("mode", "sync | backup | async | allreduce | gossip (see README, \"Training modes\")", str(d.mode))
    ("aggregate", "backup: apply a step once K gradients are in, drop later ones (0: workers - 1)", cxxopts::value<int>()->default_value(std::to_string(d.aggregate)))
    ("max-staleness", "async: reject a gradient computed more than S updates ago; its worker recomputes (0: strict)", i64(d.maxStaleness))
    ("fetch-probability", "gossip: chance of averaging with a random peer after each batch", dbl(d.fetchProbability))
    ("interpolation", "gossip: constant:V | clock | loss (how far to move toward the peer)", str(d.interpolation))
    ("divergence-threshold", "gossip: below this loss, damp the averaging by loss / T (0: off)", dbl(d.divergenceThreshold))
    ("peer-timeout-ms", "gossip: a peer whose read takes longer is picked less often", dbl(d.peerTimeoutMs));
  options.add_options("Compression")
    ("compress", "gradients (worker -> server, allreduce): none, zlib[:LEVEL], fp16, bf16, int8, topk:RATIO, randomk:RATIO, powersgd:RANK", str(d.compress))
    ("compress-weights", "weights (server -> worker): none, zlib[:LEVEL], fp16, bf16, int8", str(d.compressWeights))
    ("error-feedback", "auto (on for topk, randomk, powersgd) | on | off: add what was not sent to the next gradient", str(d.errorFeedback));
  options.add_options("Run")
    ("train-dir", "where run.json, metrics.jsonl, ckpt/ and trained_model.pt go", str(d.trainDir))
    ("overwrite", "replace an earlier run in --train-dir", flag())
    ("resume", "continue the run in --train-dir from its newest valid checkpoint (same result as an uninterrupted run)", flag())
    ("skip-nonfinite", "drop and count a step whose loss or averaged gradient is NaN/inf instead of stopping", flag())
    ("inject-nan", "testing: RANK:STEP makes worker RANK's loss NaN at STEP", str(""))
    ("checkpoint-every", "publish a checkpoint every N steps (0: only the final one)", i64(d.checkpointEvery))
    ("log-every", "progress line and metrics.jsonl record every N steps", i64(d.logEvery))
    ("threads", "intra-op threads per rank (0: cores / ranks on the host)", cxxopts::value<int>()->default_value(std::to_string(d.threads)))
    ("device", "auto | cpu | mps | cuda (auto: MPS, else CUDA, else CPU)", str(d.device))
    ("timeout", "seconds any rank waits for the others before giving up", dbl(d.timeoutSeconds))
    ("doorbell", "on | off: UDP wake-up datagrams between ranks (a hint that shortens waits; trusted networks only)", str(d.doorbell))
    ("overlap", "sync: on | off: reduce gradient buckets while backward still runs, update each as it arrives", str(d.overlap))
    ("bucket-kb", "overlap: gradient bucket size in KiB", i64(d.bucketKb))
    ("max-seconds", "stop training after this many seconds and write the final files (0: no limit)", dbl(d.maxSeconds))
    ("straggle", "testing: RANK:MS makes rank RANK sleep MS ms after each batch (per virtual shard it computes)", str(""))
    ("simulate-compute", "benchmarks of the protocol at scale: every computing rank sleeps MS ms per batch instead of "
                         "forward/backward and sends a random gradient of the model's size (learns nothing)", dbl(d.simulateComputeMs))
    ("config", "read flags from FILE (key = value lines); command-line flags override it", str(""))
    ("dry-run", "check config, data, model, devices and world size on every rank, print the plan, train nothing", flag())
    ("probe", "time a few steps on every worker, the links to rank 0 and the codecs; predict samples/s for 1..N "
              "workers per mode and codec, recommend one, write probe.json in the train dir; train nothing", flag())
    ("version", "print versions and exit")
    ("h,help", "print this help");
  // clang-format on

  TrainCommand command;
  // Flags from --config FILE come first so that the command line overrides them.
  std::vector<std::string> args(argv, argv + argc);
  std::string configPath = parseOrThrow(options, argc, argv)["config"].as<std::string>();
  if (!configPath.empty()) {
    auto fromFile = configFileArguments(configPath);
    std::vector<std::string> fileOnly = {args[0]};
    fileOnly.insert(fileOnly.end(), fromFile.begin(), fromFile.end());
    try {
      withArgv(fileOnly, [&](int n, char** v) { parseOrThrow(options, n, v); });
    } catch (const ConfigError& e) {
      throw ConfigError(configPath + ": " + e.what());
    }
    args.insert(args.begin() + 1, fromFile.begin(), fromFile.end());
  }
  cxxopts::ParseResult r;
  withArgv(args, [&](int n, char** v) { r = parseOrThrow(options, n, v); });
  if (r.count("help")) {
    command.helpText = options.help();
    return command;
  }
  command.version = r.count("version") > 0;
  command.listModels = r.count("list-models") > 0;
  command.listDatasets = r.count("list-datasets") > 0;
  auto& c = command.cfg;
  try {
    c.mode = r["mode"].as<std::string>();
    c.aggregate = r["aggregate"].as<int>();
    c.maxStaleness = r["max-staleness"].as<std::int64_t>();
    c.fetchProbability = r["fetch-probability"].as<double>();
    c.interpolation = r["interpolation"].as<std::string>();
    c.divergenceThreshold = r["divergence-threshold"].as<double>();
    c.peerTimeoutMs = r["peer-timeout-ms"].as<double>();
    c.compress = r["compress"].as<std::string>();
    c.compressWeights = r["compress-weights"].as<std::string>();
    c.errorFeedback = r["error-feedback"].as<std::string>();
    c.maxSeconds = r["max-seconds"].as<double>();
    c.overlap = r["overlap"].as<std::string>();
    c.bucketKb = r["bucket-kb"].as<std::int64_t>();
    c.straggle = r["straggle"].as<std::string>();
    c.simulateComputeMs = r["simulate-compute"].as<double>();
    c.model = r["model"].as<std::string>();
    c.dataset = r["dataset"].as<std::string>();
    c.loss = r["loss"].as<std::string>();
    c.dataDir = r["data-dir"].as<std::string>();
    c.syntheticSize = r["synthetic-size"].as<std::int64_t>();
    c.batchSize = r["batch-size"].as<std::int64_t>();
    c.virtualShards = r["virtual-shards"].as<int>();
    c.reshard = r["reshard"].as<bool>();
    c.balance = r["balance"].as<bool>();
    c.lr = r["lr"].as<double>();
    c.lrScaling = r["lr-scaling"].as<std::string>();
    c.warmupSteps = r["warmup-steps"].as<std::int64_t>();
    c.lrDecay = r["lr-decay"].as<std::string>();
    c.momentum = r["momentum"].as<double>();
    c.nesterov = r["nesterov"].as<bool>();
    c.weightDecay = r["weight-decay"].as<double>();
    c.steps = r["steps"].as<std::int64_t>();
    c.epochs = r["epochs"].as<std::int64_t>();
    c.seed = r["seed"].as<std::uint64_t>();
    c.trainDir = r["train-dir"].as<std::string>();
    c.overwrite = r["overwrite"].as<bool>();
    c.dryRun = r["dry-run"].as<bool>();
    c.probe = r["probe"].as<bool>();
    c.resume = r["resume"].as<bool>();
    c.skipNonfinite = r["skip-nonfinite"].as<bool>();
    c.injectNan = r["inject-nan"].as<std::string>();
    c.checkpointEvery = r["checkpoint-every"].as<std::int64_t>();
    c.logEvery = r["log-every"].as<std::int64_t>();
    c.threads = r["threads"].as<int>();
    c.device = r["device"].as<std::string>();
    c.timeoutSeconds = r["timeout"].as<double>();
    c.doorbell = r["doorbell"].as<std::string>();
  } catch (const cxxopts::exceptions::exception& e) {
    throw ConfigError(e.what());
  }
  c.validate();
  codec::validateSpec(c.compress, false, "compress");
  codec::validateSpec(c.compressWeights, true, "compress-weights");
  // Files (a model or dataset of the user's) are read, and checked against each other, at
  // start-up on every rank; names are checked here.
  if (config::isModelFile(c.model) || config::isDatasetFile(c.dataset)) {
    if (!config::isModelFile(c.model)) models::modelInfo(c.model);
    if (!config::isDatasetFile(c.dataset)) data::datasetInfo(c.dataset);
    return command;
  }
  const auto& model = models::modelInfo(c.model);        // throws ConfigError listing the names
  const auto dataset = data::datasetInfo(c.dataset);
  if (model.inputShape != dataset.shape) {
    throw ConfigError(fmt::format("--model {} takes {} images but --dataset {} has {} (see --list-models, --list-datasets)",
                                  c.model, fmt::join(model.inputShape, "x"), c.dataset, fmt::join(dataset.shape, "x")));
  }
  return command;
}

EvalCommand parseEvalCommand(int argc, char** argv) {
  EvalCommand d;
  cxxopts::Options options(
      "pseval",
      "Evaluates every checkpoint that pstrain publishes in TRAIN_DIR/ckpt, once each, on the\n"
      "test set; appends TRAIN_DIR/eval.csv and eval.jsonl. The model and dataset are read\n"
      "from the checkpoint.\n");
  options.set_width(100);
  // clang-format off
  options.add_options()
    ("train-dir", "the run's directory (required)", cxxopts::value<std::string>())
    ("follow", "keep waiting for new checkpoints until trained_model.pt appears")
    ("data-dir", "dataset folder (default: the dataset's folder in $PSTRAIN_DATA_DIR, else in /usr/share/datasets)", cxxopts::value<std::string>()->default_value(""))
    ("model", "a model file's TorchScript in place of the path the checkpoints record (if it moved)", cxxopts::value<std::string>()->default_value(""))
    ("device", "cpu | mps | cuda | auto", cxxopts::value<std::string>()->default_value(d.device))
    ("poll-seconds", "with --follow: seconds between looks", cxxopts::value<double>()->default_value("2"))
    ("idle-timeout", "with --follow: give up after this many seconds without a new checkpoint", cxxopts::value<double>()->default_value("900"))
    ("batch-size", "evaluation batch size", cxxopts::value<std::int64_t>()->default_value(std::to_string(d.batchSize)))
    ("threads", "intra-op threads (0: all cores)", cxxopts::value<int>()->default_value("0"))
    ("plot", "when done, render TRAIN_DIR/plots/*.png with tools/plot (needs gnuplot)")
    ("predictions", "write the predicted class of every test sample (last checkpoint evaluated) to this file", cxxopts::value<std::string>()->default_value(""))
    ("h,help", "print this help");
  // clang-format on
  EvalCommand command;
  auto r = parseOrThrow(options, argc, argv);
  if (r.count("help")) {
    command.helpText = options.help();
    return command;
  }
  try {
    if (!r.count("train-dir")) throw ConfigError("--train-dir is required");
    command.trainDir = r["train-dir"].as<std::string>();
    command.follow = r.count("follow") > 0;
    command.dataDir = r["data-dir"].as<std::string>();
    command.model = r["model"].as<std::string>();
    command.device = r["device"].as<std::string>();
    command.pollSeconds = r["poll-seconds"].as<double>();
    command.idleTimeoutSeconds = r["idle-timeout"].as<double>();
    command.batchSize = r["batch-size"].as<std::int64_t>();
    command.threads = r["threads"].as<int>();
    command.predictionsPath = r["predictions"].as<std::string>();
    command.plot = r.count("plot") > 0;
  } catch (const cxxopts::exceptions::exception& e) {
    throw ConfigError(e.what());
  }
  if (command.batchSize <= 0 || command.batchSize > 1'000'000) throw ConfigError("--batch-size must be in [1, 1000000]");
  if (command.threads < 0 || command.threads > 1024) throw ConfigError("--threads must be 0 (all cores) or up to 1024");
  for (auto [flag, value] : {std::pair<const char*, double>{"--poll-seconds", command.pollSeconds},
                             {"--idle-timeout", command.idleTimeoutSeconds}}) {
    if (!(std::isfinite(value) && value > 0 && value <= config::kMaxSeconds)) {
      throw ConfigError(fmt::format("{} must be a positive number of seconds up to {} (got {})", flag,
                                    config::kMaxSeconds, value));
    }
  }
  return command;
}

}  // namespace pstrain::launcher
