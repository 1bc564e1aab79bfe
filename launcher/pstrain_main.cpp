// pstrain: one SPMD binary; rank 0 is the parameter server, ranks 1..N the workers.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <future>
#include <iostream>
#include <optional>
#include <thread>

#include "data/Dataset.h"
#include "data/Formats.h"
#include "launcher/Cli.h"
#include "launcher/ErrorLine.h"
#include "launcher/LinePrefix.h"
#include "launcher/Device.h"
#include "launcher/Doctor.h"
#include "models/Registry.h"
#include "models/StateDict.h"
#include "models/ScriptModel.h"
#include "runtime/Errors.h"
#include "runtime/Portable.h"
#include "runtime/Stop.h"
#include "runtime/checkpoint/WeightsFile.h"
#include "runtime/comm/mpi/MpiComm.h"
#include "runtime/config/Layout.h"
#include "runtime/loss/Loss.h"
#include "runtime/metrics/Startup.h"
#include "runtime/probe/Probe.h"
#include "runtime/roles/Autocast.h"
#include "runtime/training/Training.h"

namespace {

using namespace pstrain;

void printModels() {
  fmt::print("{:<10} {:>12}  {:<10} {}\n", "model", "parameters", "input", "description");
  for (const auto& info : models::modelList()) {
    auto model = models::makeModel(info.name);
    fmt::print("{:<10} {:>12}  {:<10} {}\n", info.name, models::parameterCount(*model),
               fmt::format("{}", fmt::join(info.inputShape, "x")), info.description);
  }
  fmt::print("{:<10} {:>12}  {:<10} {}\n", "FILE.pt", "yours", "any",
             "a TorchScript file of your own model: torch.jit.script(model).save(\"FILE.pt\"), "
             "then --model FILE.pt (README: \"Your own model and data\")");
}

void printDatasets() {
  fmt::print("{:<16} {:<8} {:>7}  {}\n", "dataset", "input", "classes", "description [default --data-dir]");
  for (const auto& info : data::datasetList()) {
    fmt::print("{:<16} {:<8} {:>7}  {}{}\n", info.name, fmt::format("{}", fmt::join(info.shape, "x")), info.classes,
               info.description, info.defaultDir.empty() ? "" : " [" + info.defaultDir + "]");
  }
  fmt::print("\nor --dataset PATH, one of ({}):\n", "docs/own-model.md, docs/language-models.md");
  for (const auto& format : data::formats()) {
    if (format.recognises) fmt::print("  {:<8} {}\n", format.name, format.reads);
  }
}

// One line per mode, in the table's columns (the benches read it).
void printModes() {
  fmt::print("{:<10} {:<7} {:<15} {:<11} {:<8} {:<8} {}\n", "mode", "ranks", "exchange", "quorum", "vshards",
             "updates", "description");
  for (const auto& mode : config::modes()) {
    fmt::print("{:<10} {:<7} {:<15} {:<11} {:<8} {:<8} {}\n", mode.name, mode.peers() ? "peers" : "server",
               config::nameOf(mode.exchange), config::nameOf(mode.quorum), mode.dealsVirtualShards ? "yes" : "no",
               mode.updatePerBatch ? "per-batch" : "per-step", mode.help);
  }
}

std::atomic<int> gRank{-1};
char gSignalPrefix[160] = "";  // linePrefix(), for the signal thread's last words

void setSignalPrefix(const std::string& prefix) {
  std::snprintf(gSignalPrefix, sizeof gSignalPrefix, "%s", prefix.c_str());
}

// SIGTERM/SIGINT/SIGHUP (mpirun forwards them, and sends SIGTERM to every rank when one
// dies): say which rank stopped at which step, undo what must be (runTerminationCleanup:
// rank 0's train dir), then leave at once. Checkpoints are written to a temporary name and
// renamed, so leaving mid-write never exposes a partial file. The handler only writes the
// signal's number into a pipe (any thread may take the signal: libraries start threads
// before main), and a thread of its own does the rest as ordinary code.
int gSignalPipe[2] = {-1, -1};

extern "C" void onTerminate(int signal) {
  const unsigned char number = static_cast<unsigned char>(signal);
  ssize_t ignored = ::write(gSignalPipe[1], &number, 1);
  (void)ignored;
}

// SIGUSR1 (mpirun forwards it to every rank): checkpoint at the next step and exit with a
// resumable status (pstrain-run's way to take hosts back).
extern "C" void onStopRequest(int) { stopRequested() = true; }

void handleSignals() {
  if (!portable::closeOnExecPipe(gSignalPipe)) return;  // the signals' default actions: the process ends at once
  const std::int64_t oomKillsBefore = portable::oomKills();
  std::thread([oomKillsBefore] {
    unsigned char signal = 0;
    while (::read(gSignalPipe[0], &signal, 1) != 1) {
    }
    // Another rank that the kernel killed for memory (SIGKILL, no word of its own) shows in
    // this host's memory cgroup: said, since mpirun only says "signal 9".
    const std::int64_t oomKills = portable::oomKills();
    const std::string memory =
        oomKills > oomKillsBefore && oomKillsBefore >= 0
            ? fmt::format("; the kernel's OOM killer ended {} process(es) of this host's memory cgroup meanwhile: a "
                          "rank ran out of memory (its limit: {:.2f} GiB; pstrain --dry-run plans each host's peak)",
                          oomKills - oomKillsBefore, portable::memoryLimitBytes() / double(1 << 30))
            : "";
    // Straight to the descriptor: std::cerr's line buffer belongs to the other threads.
    const std::string line = fmt::format("{}pstrain: rank {}: stopped by signal {} at step {} (the job was "
                                         "interrupted, or another rank failed{})\n",
                                         gSignalPrefix, gRank.load(), signal, currentStep().load(), memory);
    ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
    (void)ignored;
    runTerminationCleanup();
    ::_exit(128 + signal);
  }).detach();
  struct sigaction action {};
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  action.sa_handler = onTerminate;
  for (int signal : {SIGTERM, SIGINT, SIGHUP}) ::sigaction(signal, &action, nullptr);
  action.sa_handler = onStopRequest;
  ::sigaction(SIGUSR1, &action, nullptr);
}

std::string commandLine(int argc, char** argv) {
  std::string line;
  for (int i = 0; i < argc; ++i) line += (i ? " " : "") + std::string(argv[i]);
  return line;
}

// The ranks agree on whether their command lines hold: the same argv fails the same way on
// every rank (rank 0 says it once), but a --config file missing on one host fails there
// alone, and that rank must neither leave the others waiting nor go unheard. False when
// any rank's does not hold.
bool commandLinesHold(comm::mpi::MpiComm& comm, const std::string& parseError) {
  try {
    const auto verdicts = comm.allGather(parseError, "start-up (command lines)");
    if (std::all_of(verdicts.begin(), verdicts.end(), [](const std::string& v) { return v.empty(); })) return true;
    if (comm.rank() == 0) {
      launcher::printErrorLine(launcher::describeVerdicts(verdicts, "pstrain: error: ", " (see pstrain --help)"));
    }
    return false;
  } catch (const std::exception& e) {
    launcher::printErrorLine(fmt::format("pstrain: rank {}: {}", comm.rank(), e.what()));
    comm::mpi::MpiSession::abortJob(1);
  }
}

// What --help, --version and the lists ask for, and the command line's warnings (rank 0
// prints them).
void printRequested(const launcher::TrainCommand& cli) {
  for (const auto& warning : cli.warnings) std::cout << "pstrain: warning: " << warning << std::endl;
  if (!cli.helpText.empty()) std::cout << cli.helpText;
  if (cli.version) {
    fmt::print("pstrain 0.1 (libtorch {}, {}, BLAS: {})\n", TORCH_VERSION, comm::mpi::MpiSession::libraryVersion(),
               launcher::processBlas().name);
  }
  if (cli.listModels) printModels();
  if (cli.listDatasets) printDatasets();
  if (cli.listModes) printModes();
}

// --init-from: the model's weights from the file, on every rank, each tensor read straight
// into the model (a fine-tune's frozen weights never travel: each rank takes them from its
// copy); cfg.initFromIdentity, which the handshake compares, from what was read.
void initFrom(models::Net& model, config::RunPlan& cfg, int rank) {
  const std::string source = "--init-from " + cfg.initFrom;
  const models::Pretrained loaded = [&] {
    try {
      return models::loadPretrained(model, checkpoint::WeightsReader(cfg.initFrom), source);
    } catch (const ConfigError& e) {
      if (std::string(e.what()).rfind(source, 0) == 0) throw;
      throw ConfigError(fmt::format("--init-from {}", e.what()));
    }
  }();
  cfg.initFromIdentity = loaded.identity;
  if (rank != 0) return;
  // The kept tensors by name, the first few of them (a LoRA model keeps 4 a layer).
  constexpr std::size_t kNamed = 4;
  const std::size_t named = std::min(loaded.kept.size(), kNamed);
  const std::string kept = fmt::format(
      "{}{}", fmt::join(loaded.kept.begin(), loaded.kept.begin() + static_cast<std::ptrdiff_t>(named), ", "),
      loaded.kept.size() > named ? fmt::format(" and {} more", loaded.kept.size() - named) : "");
  std::cout << fmt::format("pstrain: --init-from {}: {} tensors ({}){}", cfg.initFrom, loaded.tensors, loaded.identity,
                           loaded.kept.empty() ? "" : fmt::format("; {} trained tensor(s) it lacks keep the model's values "
                                                                  "(a fine-tune's adapters): {}", loaded.kept.size(), kept))
            << std::endl;
}

// This rank's device, model and data, then its part of the training (or of the probe).
// `prefetched` holds the training set's loading when this rank computes. Throws on any error.
void trainOrProbe(comm::mpi::MpiComm& comm, const launcher::TrainCommand& cli, std::future<data::Dataset>& prefetched,
                  const std::string& command) {
  config::RunPlan cfg(cli.cfg);  // its loss and init file resolved here, once the model is read
  metrics::Startup& startup = metrics::Startup::process();
  comm.connect(cfg.doorbell == config::OnOff::On);
  startup.mark("command_line");
  const bool computes = config::Layout(cfg, comm.size()).computes(comm.rank());
  // A worker's forward and backward, rank 0's optimizer update (in ranges of the flat weights).
  const int threads = !computes && cfg.serverThreads > 0 ? cfg.serverThreads : cfg.threads;
  launcher::setComputeThreads(threads > 0 ? threads : launcher::autoThreads());
  // A server never computes: it keeps the weights on the CPU next to the network.
  c10::Device device = computes ? launcher::chooseDevice(cfg.device, launcher::localRank()) : c10::Device(c10::kCPU);
  if (!device.is_cpu() && cfg.streamsGradients() && !comm::mpi::MpiSession::callableFromAnyThread()) {
    throw ConfigError(fmt::format(
        "--overlap on with a worker on {}: autograd runs its gradient hooks, which start sending the gradient, "
        "on its own device thread, and this MPI library does not allow MPI calls from another thread "
        "(MPI_THREAD_SERIALIZED); use --overlap off", device.str()));
  }
  if (computes) roles::checkPrecision(device, config::precisionInfo(cfg.precision));
  // A worker computing in bfloat16 holds a frozen base in it: made so, and read so from --init-from.
  const bool halfFrozen = computes && config::precisionInfo(cfg.precision).kind == config::PrecisionKind::Bf16;
  models::modelFilePolicy() = {cfg.trustModel, cfg.timeoutSeconds, [&comm](const std::string& message) {
    launcher::printErrorLine(fmt::format("pstrain: error: rank {}: {}", comm.rank(), message));
    comm::mpi::MpiSession::abortJob(kConfigErrorExit);
  }, halfFrozen};
  torch::manual_seed(cfg.seed);
  // A zoo model is made for the dataset's classes; a model file is what it is.
  auto model = models::makeModel(cfg.model, config::isModelFile(cfg.model) ? 0 : data::datasetInfo(cfg.dataset).classes,
                                 training::weightsNeeded(cfg, comm.rank()));
  cfg.resolvedLoss = loss::lossForModel(cfg.loss, cli.lossByTargets, *model, cfg.model);
  if (!cfg.initFrom.empty()) {
    initFrom(*model, cfg, comm.rank());
  } else if (!model->unfilled().empty()) {
    throw ConfigError(fmt::format("--model {}: the file holds no values for {} of its tensors ({}{}): it is a model's "
                                  "architecture (tools/hf_model.py writes one): give its weights with --init-from "
                                  "HUB_DIR", cfg.model, model->unfilled().size(), model->unfilled().front(),
                                  model->unfilled().size() > 1 ? ", ..." : ""));
  }
  model->to(device);
  if (halfFrozen) {
    // --precision bf16-weights: a worker holds the weights in bfloat16 from now on, each
    // float32 tensor going as its copy comes (the buffers stay float32); under bf16 and
    // bf16-weights alike, the frozen ones too (those the file held no values for are so
    // already: never whole in float32).
    torch::NoGradGuard noGrad;
    if (cfg.bf16Weights()) {
      for (auto& p : model->parameters()) p.set_data(p.to(torch::kBFloat16));
    }
    for (auto& [name, w] : model->frozen()) {
      if (w.scalar_type() == torch::kFloat32) w.set_data(w.to(torch::kBFloat16));
    }
  }
  startup.mark("model");
  std::optional<data::Dataset> train;
  if (computes) {
    // Rethrows the loading thread's error, if any (mpirun's rank numbering is MPI's, so
    // the prefetch is there exactly when this rank computes).
    train = prefetched.valid() ? prefetched.get() : data::loadDataset(data::sourceOf(cfg), data::Split::Train);
    portable::keepFreedMemoryForReuse(portable::kKeptBlocksForTraining);  // after loading: its big temporaries go back at once
    startup.mark("data");
  }
  training::RunInfo info{comm::mpi::MpiSession::libraryVersion(), command, comm::mpi::MpiSession::yieldWhenIdleSetting(),
                      launcher::processBlas()};
  if (cfg.probe) {
    probe::runProbe(comm, cfg, *model, train ? &*train : nullptr, device, info);
  } else {
    training::runTraining(comm, cfg, *model, train ? &*train : nullptr, device, info);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (const auto status = models::serveModelCheck(argc, argv)) return *status;
  metrics::Startup& startup = metrics::Startup::process();  // main()'s start
  handleSignals();
  const std::string command = commandLine(argc, argv);
  // The command line is read before MPI starts; the ranks agree on its verdict below, once
  // they can talk.
  launcher::TrainCommand cli;
  std::string parseError;
  try {
    cli = launcher::parseTrainCommand(argc, argv);
  } catch (const ConfigError& e) {
    parseError = e.what();
  }
  const config::TrainConfig& cfg = cli.cfg;
  const bool training = parseError.empty() && cli.helpText.empty() && !cli.version && !cli.listModels &&
                        !cli.listDatasets && !cli.listModes;
  comm::mpi::MpiSession mpi(&argc, &argv);
  startup.mark("mpi_init");
  // A rank that will train decodes its data on a thread of its own while the ranks agree on
  // the command line, build the model and shake hands. Not earlier: MPI_Init (and
  // MpiSession before it) sets environment variables, and a getenv on another thread
  // meanwhile may read an environment that setenv has just freed (seen: SIGSEGV in getenv,
  // from the loader's portable::ranksOnThisHost, in 3 of about 730 starts). libtorch's
  // getenvs on that thread are out of our hands, so no thread runs during those calls.
  // (std::async's future waits for its thread when destroyed: an early return does too.)
  std::future<data::Dataset> prefetched;
  if (training && !cli.doctor && config::Layout(cfg, launcher::launchedSize()).computes(launcher::launchedRank())) {
    prefetched = std::async(std::launch::async, [&cfg] {
      return data::loadDataset(data::sourceOf(cfg), data::Split::Train);
    });
  }
  comm::mpi::MpiComm comm;
  const int rank = comm.rank();
  gRank = rank;
  if (!commandLinesHold(comm, parseError)) return kConfigErrorExit;
  if (rank == 0) printRequested(cli);
  if (!training) return 0;
  launcher::prefixLines(rank, comm.hostName());
  setSignalPrefix(launcher::linePrefix());
  try {
    if (cli.doctor) {
      comm.connect(cfg.doorbell == config::OnOff::On);
      return launcher::runDoctor(comm, cfg);
    }
    trainOrProbe(comm, cli, prefetched, command);
  } catch (const CollectiveConfigError& e) {
    if (rank == 0) launcher::printErrorLine(fmt::format("pstrain: error: {}", e.what()));
    return kConfigErrorExit;
  } catch (const InputError& e) {
    // A refusal of this rank's alone (rank 0's train dir: a run already there, a held lock,
    // a leftover .replaced/; a device this host lacks; a data file gone bad): final, so the
    // job ends with the refusal's status, which pstrain-run does not retry.
    launcher::printErrorLine(fmt::format("pstrain: error: rank {}: {}", rank, e.what()));
    comm::mpi::MpiSession::abortJob(kConfigErrorExit);
  } catch (const std::exception& e) {
    launcher::printErrorLine(fmt::format("pstrain: rank {}: {}", rank, e.what()));
    comm::mpi::MpiSession::abortJob(1);
  }
  return stoppedOnRequest() ? kResumableExit : 0;
}
