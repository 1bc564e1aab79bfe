#pragma once
// Command lines of pstrain and pseval (cxxopts). Parsing is pure: no MPI, no files read, so
// every rank of a job reaches the same verdict on the same argv.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/config/Flags.h"
#include "runtime/config/TrainConfig.h"

namespace pstrain::launcher {

using TrainCommand = config::TrainFlags;

// pstrain's command line (config::parseTrainFlags), and the names in it that a registry
// knows: models, datasets and codecs, and a zoo model's input against a built-in dataset's.
// Throws ConfigError on unknown flags, bad values or stray arguments.
TrainCommand parseTrainCommand(int argc, char** argv);

// One line per distinct error of the ranks' start-up `verdicts` (indexed by rank; empty: no
// error), each as PREFIX + message + SUFFIX, naming the ranks unless every rank says it.
std::string describeVerdicts(const std::vector<std::string>& verdicts, const std::string& prefix,
                             const std::string& suffix);

struct EvalCommand {
  std::string trainDir;
  std::string outDir;  // eval.csv, eval.jsonl, the event file and plots/ (default: the train dir)
  std::string dataDir;
  std::string model;  // the model file of checkpoints that were trained from one (never followed from them)
  bool trustModel = false;  // that file may call file or network operators (models::modelFilePolicy)
  std::string device = "cpu";
  bool follow = false;
  double pollSeconds = 2;
  double idleTimeoutSeconds = 900;
  // A checkpoint that fails its checks is read again 1, 2, 4 ... s later, for this long: on a
  // shared file system another host's new file can look incomplete until the client's
  // caches expire (NFS keeps attributes and names up to 60 s by default).
  double retrySeconds = 60;
  std::int64_t batchSize = 1000;
  std::int64_t evalWindows = 1000;  // a token file's val split: this many windows, spread evenly (0: all)
  int threads = 0;
  std::string predictionsPath;  // argmax per test sample of the last evaluated checkpoint
  bool plot = false;            // run tools/plot on the train dir at the end
  bool tensorboard = true;      // test metrics per checkpoint into a TensorBoard event file in the train dir
  std::string exportPath;       // write a checkpoint's weights there (.safetensors or a state dict) instead of evaluating
  std::int64_t exportStep = -1; // which checkpoint --export writes (-1: the newest)
  std::string exportFormat;     // "" (a file, by its extension), "hf", "peft" or "mlx" (a folder)
  std::string helpText;
};

EvalCommand parseEvalCommand(int argc, char** argv);

// Intra-op threads for this process when the user gave 0: the cores divided evenly among
// the ranks that Open MPI placed on this host (at least 1).
int autoThreads();

// This rank's index among the ranks on its host (0 outside mpirun).
int localRank();
// This process's rank, and the world's size, as mpirun tells them before MPI_Init (0 and 1
// without mpirun).
int launchedRank();
int launchedSize();

}  // namespace pstrain::launcher
