#pragma once
// Every file a run leaves in its train dir (DESIGN.md, "Files a run leaves"), named in this
// one place, and the naming of its checkpoints. Torch-free: pstrain, pseval and pstrain-run
// read it.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pstrain::rundir {

inline constexpr const char* kRunJson = "run.json";             // configuration, ranks, start-up
inline constexpr const char* kMetrics = "metrics.jsonl";        // rank 0: one line per logged step
inline constexpr const char* kCheckpoints = "ckpt";             // step-NNNNNNNN.pt and .ok
inline constexpr const char* kTrainedModel = "trained_model.pt";  // final weights, a plain state_dict
inline constexpr const char* kTrainedScript = "trained_model.torchscript.pt";  // a model file's module, trained
inline constexpr const char* kTrainedOptimizer = "trained_model.optimizer.pt";  // the optimizer's state then
inline constexpr const char* kEvalCsv = "eval.csv";             // pseval: one row per checkpoint
inline constexpr const char* kEvalJsonl = "eval.jsonl";
inline constexpr const char* kElastic = "elastic.jsonl";        // pstrain-run's events
inline constexpr const char* kProbe = "probe.json";             // pstrain --probe
inline constexpr const char* kPlots = "plots";                  // tools/plot's PNGs
inline constexpr const char* kLock = ".lock";                   // the job that holds the dir
inline constexpr const char* kSetAside = ".replaced";           // an earlier run, while --overwrite replaces it
inline constexpr const char* kSettingAside = ".replacing";      // the same being set aside: whole once renamed .replaced

// What --overwrite sets aside: everything a run, its evaluator and its plots leave. Not
// elastic.jsonl (pstrain-run's, open while it relaunches the job with --overwrite) nor
// probe.json (a measurement taken before the run, for the run that follows it). The
// TensorBoard event files (one per process, named by time, host and pid) are those in
// `trainDir` now.
std::vector<std::string> runFiles(const std::string& trainDir);
// What --resume writes again at the end: until then the run is not finished.
const std::vector<std::string>& finalFiles();

// TRAIN_DIR/NAME.
std::string pathOf(const std::string& trainDir, const std::string& name);

// "step-00000500": a checkpoint's name without its extension (.pt, .ok).
std::string checkpointName(std::int64_t step);
// The step of a file called "step-NNNNNNNN" + `extension` (8 to 18 digits), else none.
std::optional<std::int64_t> checkpointStep(const std::string& fileName, const std::string& extension);

// A checkpoint whose .ok marker is in `dir` (its .pt beside it): published.
struct Published {
  std::int64_t step;
  std::string path;  // the .pt
};
// The published checkpoints in `dir`, oldest first; none if `dir` does not exist.
std::vector<Published> listPublished(const std::string& dir);

}  // namespace pstrain::rundir
