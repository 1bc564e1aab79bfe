#pragma once
// pstrain's flags, one row each in one table (Flags.cpp): name, help group and text, the
// TrainConfig field it sets, how ranks agree on it, and its check. The table makes the
// command line and --help (cxxopts), the config file's keys, the read-back into TrainConfig,
// TrainConfig::validate(), the fingerprint's fields and the handshake's. A new flag is one
// row plus its TrainConfig field. Torch-free: pstrain-run reads pstrain's flags with it.
#include <string>
#include <utility>
#include <vector>

#include "runtime/config/RunPlan.h"
#include "runtime/config/TrainConfig.h"

namespace pstrain::config {

// How the ranks of a job agree on a flag.
enum class Agreement {
  HostLocal,    // each rank its own (paths, threads, device, logging)
  Compared,     // the same on every rank (the handshake checks), not part of the training's identity
  Fingerprint,  // the same on every rank, and part of the fingerprint (fingerprintFields)
};

// pstrain's command line, parsed.
struct TrainFlags {
  TrainConfig cfg;
  std::string helpText;  // set when --help was given: print it and exit 0
  bool version = false;
  bool listModels = false;
  bool listDatasets = false;
  bool listModes = false;
  bool doctor = false;   // check every host (launcher/Doctor.h) and exit
  std::vector<std::string> warnings;  // for rank 0 to print: a flag the command line repeats
  // What --loss auto is by the data (launcher/Cli, which reads a data file's labels): "mse"
  // for float targets; "": the model decides (loss::lossForModel).
  std::string lossByTargets;
};

// Parses pstrain's arguments (`args` without the program name): the flags of `--config FILE`
// first ("key = value" lines, keys as the flags without "--", "#" starts a comment), then the
// command line's over them. Checks every value (TrainConfig::validate). Throws ConfigError
// on unknown flags, bad values, stray arguments or a bad config file. Pure: no MPI, no file
// but the config file read, so every rank reaches the same verdict on the same arguments.
TrainFlags parseTrainFlags(const std::vector<std::string>& args);

// The flags a config file stands for, as "--key=value" arguments. Throws ConfigError naming
// the file and line of a malformed line.
std::vector<std::string> configFileArguments(const std::string& path);

// The command line that stands for `cfg`: every flag of the table as "--name=value" with
// its canonical value, in the table's order; parseTrainFlags() of it gives `cfg` back.
// pstrain-run launches its jobs with it (a --config file's flags included).
std::vector<std::string> commandLineOf(const TrainConfig& cfg);

// The flags with Agreement::Fingerprint as `cfg` reads them, as (flag name, canonical value)
// in the table's order: those that identify a training (the fingerprint's input,
// RunPlan::fingerprint, of its explicitFlags()). A field that does not apply to cfg's mode
// reads "-"; one newer than some runs, at its default, is left out.
std::vector<std::pair<std::string, std::string>> fingerprintFields(const TrainConfig& cfg);

// The fingerprint's fields, then every flag with Agreement::Compared, of the run's explicit
// flags (what every rank must agree on).
std::vector<std::pair<std::string, std::string>> agreedFields(const RunPlan& run);
// The same for every flag (run.json's "config").
std::vector<std::pair<std::string, std::string>> allFields(const RunPlan& run);

}  // namespace pstrain::config
