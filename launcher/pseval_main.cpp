// pseval: evaluates the checkpoints a pstrain run publishes, each exactly once.
#include <fmt/format.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include "data/Dataset.h"
#include "launcher/Cli.h"
#include "launcher/ErrorLine.h"
#include "launcher/Device.h"
#include "launcher/Export.h"
#include "models/Registry.h"
#include "models/StateDict.h"
#include "models/ScriptModel.h"
#include "runtime/Errors.h"
#include "runtime/Portable.h"
#include "runtime/Text.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/config/TrainConfig.h"
#include "runtime/metrics/Clock.h"
#include "runtime/metrics/Json.h"
#include "runtime/metrics/EventFile.h"
#include "runtime/metrics/JsonLines.h"
#include "runtime/metrics/RecordFile.h"
#include "runtime/loss/Evaluation.h"
#include "runtime/loss/Loss.h"
#include "runtime/rundir/RunFiles.h"

namespace {

using namespace pstrain;
namespace fs = std::filesystem;

// Steps already in eval.csv: a restarted pseval does not evaluate them again.
std::set<std::int64_t> evaluatedSteps(const fs::path& csv) {
  std::set<std::int64_t> steps;
  std::ifstream in(csv);
  std::string line;
  while (std::getline(in, line)) {
    // A step as pstrain writes it (at most 18 digits: an int64); any other line is not a row.
    const std::string step = line.substr(0, line.find(','));
    if (!step.empty() && step.size() <= 18 && step.find_first_not_of("0123456789") == std::string::npos) {
      steps.insert(std::stoll(step));
    }
  }
  return steps;
}

class Evaluator {
 public:
  Evaluator(const launcher::EvalCommand& cmd, c10::Device device)
      : cmd_(cmd), device_(device), dir_(cmd.trainDir), out_(cmd.outDir), done_(evaluatedSteps(out_ / rundir::kEvalCsv)) {}

  // Evaluates every published checkpoint not seen yet; returns how many it evaluated.
  int pass() {
    int evaluated = 0;
    for (const auto& published : rundir::listPublished((dir_ / rundir::kCheckpoints).string())) {
      if (done_.count(published.step) || skipped_.count(published.step)) continue;
      bool gone = false;
      // A checkpoint can fail its check while pstrain republishes it, or while a shared file
      // system's cache still shows another host's file incomplete: look again, 1, 2, 4 ... s
      // later, for --retry-for seconds before giving up on it.
      const auto firstLook = metrics::Clock::now();
      double pause = 1;
      for (int attempt = 1;; ++attempt) {
        try {
          evaluateOne(published);
          ++evaluated;
        } catch (const CheckpointError& e) {
          const double waited = metrics::secondsSince(firstLook);
          if (waited < cmd_.retrySeconds) {
            std::this_thread::sleep_for(std::chrono::duration<double>(std::min(pause, cmd_.retrySeconds - waited)));
            pause *= 2;
            continue;
          }
          if (!stillPublished(published)) {
            // Taken away, not broken: a run that replaced the earlier one (--overwrite)
            // moved it aside. Not recorded: its step is evaluated when it is published again.
            gone = true;
            break;
          }
          launcher::printErrorLine(fmt::format("pseval: skipping step {} (after {} tries in {:.0f} s): {}",
                                               published.step, attempt, waited, e.what()));
          skipped_.insert(published.step);
        }
        break;
      }
      if (!gone) done_.insert(published.step);
    }
    return evaluated;
  }

  // Whether `published` is still among the published checkpoints (the same step in the same file).
  bool stillPublished(const rundir::Published& published) const {
    for (const auto& now : rundir::listPublished((dir_ / rundir::kCheckpoints).string())) {
      if (now.step == published.step && now.path == published.path) return true;
    }
    return false;
  }

  std::size_t skipped() const { return skipped_.size(); }
  std::size_t seen() const { return done_.size(); }

 private:
  void evaluateOne(const rundir::Published& published) {
    checkpoint::Checkpoint ckpt = checkpoint::read(published);
    const data::Dataset& test = testSet(ckpt);
    auto model = models::makeModel(modelOf(ckpt), test.classes);
    checkLoss(ckpt, *model, published.path);
    models::loadStateDict(*model, ckpt.modelState, published.path);
    model->to(device_);
    // The test split must fit the model as the training split did (an id past its vocabulary
    // in val.bin, say): a clear refusal, not the model's traceback.
    loss::checkModelFitsData(*model, modelOf(ckpt), test, ckpt.loss, device_);
    loss::EvalResult r = loss::evaluate(*model, test, device_, ckpt.loss, cmd_.batchSize);
    record(ckpt, published, r);
    if (!cmd_.predictionsPath.empty() && !r.classAccuracy.empty()) {  // a label per sample
      std::ofstream out(cmd_.predictionsPath);
      for (auto p : r.predictions) out << p << "\n";
      if (!out) throw Error(cmd_.predictionsPath + ": write failed");
    }
  }

  // The zoo name, or the model file that --model names. A model file is a program: the
  // path a checkpoint records is not followed (whoever can write the checkpoints could
  // point it anywhere), only named.
  std::string modelOf(const checkpoint::Checkpoint& ckpt) const {
    if (!config::isModelFile(ckpt.model)) return ckpt.model;
    if (!cmd_.model.empty()) return cmd_.model;
    throw ConfigError(fmt::format("the checkpoints are of the model file {}: pass --model FILE to evaluate them "
                                  "(pseval runs a model file only when you name it)",
                                  ckpt.modelPath.empty() ? ckpt.model : ckpt.modelPath));
  }

  // The loss the checkpoint was trained with must be one the model computes: its own (the
  // loss "model") for a model whose forward takes the targets, a --loss row for another.
  void checkLoss(const checkpoint::Checkpoint& ckpt, const models::Net& model, const std::string& path) const {
    try {
      loss::lossForModel(ckpt.loss, /*byTargets=*/"", model, modelOf(ckpt));
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("{}: trained with the loss '{}', which does not fit the model {}: {}", path,
                                    printable(ckpt.loss), modelOf(ckpt), e.what()));
    }
  }

  const data::Dataset& testSet(const checkpoint::Checkpoint& ckpt) {
    data::DataSource source{ckpt.dataset, cmd_.dataDir, ckpt.syntheticSize, ckpt.blockSize, ckpt.ignoreIndex,
                            cmd_.evalWindows};
    const std::string key = fmt::format("{}:{}:{}:{}", ckpt.dataset, ckpt.syntheticSize, ckpt.blockSize, ckpt.ignoreIndex);
    auto it = testSets_.find(key);
    if (it == testSets_.end()) {
      it = testSets_.emplace(key, data::loadDataset(source, data::Split::Test)).first;
      portable::keepFreedMemoryForReuse(portable::kKeptBlocksForEvaluation);  // after loading, as pstrain's workers: 4x faster at batch 1000
    }
    return it->second;
  }

  void record(const checkpoint::Checkpoint& ckpt, const rundir::Published& published,
              const loss::EvalResult& r) {
    const fs::path csvPath = out_ / rundir::kEvalCsv;
    // A header unless rows are there already: an empty file (a full disk's leftover) gets one too.
    std::error_code ec;
    const bool fresh = !fs::exists(csvPath) || fs::file_size(csvPath, ec) == 0;
    metrics::RecordFile csv(csvPath.string());  // each row whole or not at all, no symbolic link followed
    // Sequence models (a target per position) have a perplexity column; a label per sample
    // one accuracy column per class.
    const bool perPosition = std::isfinite(r.perplexity);
    std::string row;
    if (fresh) {
      row += std::string("step,epoch,samples,loss,accuracy") + (perPosition ? ",perplexity" : "");
      for (std::size_t c = 0; c < r.classAccuracy.size(); ++c) row += fmt::format(",class{}", c);
      row += ",checkpoint\n";
    }
    row += fmt::format("{},{},{},{:.6f},{:.6f}", ckpt.step, ckpt.epoch, r.samples, r.loss, r.accuracy);
    if (perPosition) row += fmt::format(",{:.6f}", r.perplexity);
    for (double a : r.classAccuracy) row += fmt::format(",{:.6f}", a);
    csv.append(row + "," + published.path + "\n");

    metrics::JsonObject line;
    line.add("step", ckpt.step).add("epoch", ckpt.epoch).add("model", ckpt.model);
    line.add("samples", r.samples).add("targets", r.targets).add("loss", r.loss).add("accuracy", r.accuracy);
    if (std::isfinite(r.perplexity)) line.add("perplexity", r.perplexity);
    line.addRaw("class_accuracy", metrics::jsonArray(r.classAccuracy)).add("checkpoint", published.path);
    metrics::JsonLines((out_ / rundir::kEvalJsonl).string()).write(line);
    if (cmd_.tensorboard) {
      if (!events_) events_ = std::make_unique<metrics::EventFile>(out_.string());  // at the first result
      metrics::Scalars scalars{{"test/loss", r.loss}};
      if (std::isfinite(r.accuracy)) scalars.emplace_back("test/accuracy", r.accuracy);
      if (perPosition) scalars.emplace_back("test/perplexity", r.perplexity);
      events_->write(ckpt.step, scalars);
    }
    std::cout << fmt::format("pseval: step {} (epoch {}): test loss {:.4f}{}{} ({} {})", ckpt.step, ckpt.epoch,
                             r.loss, perPosition ? fmt::format(", perplexity {:.2f}", r.perplexity) : "",
                             std::isfinite(r.accuracy) ? fmt::format(", {}accuracy {:.2f}%", perPosition ? "token " : "",
                                                                     100 * r.accuracy) : "",
                             r.samples, ckpt.blockSize > 0 ? "windows" : "samples")
              << std::endl;
  }

  const launcher::EvalCommand& cmd_;
  c10::Device device_;
  fs::path dir_;  // the train dir: only read
  fs::path out_;  // where results go
  std::set<std::int64_t> done_;
  std::set<std::int64_t> skipped_;
  std::map<std::string, data::Dataset> testSets_;
  std::unique_ptr<metrics::EventFile> events_;
};

// Runs tools/plot (PSTRAIN_PLOT overrides where it is) on the train dir, its plots/ going to
// `outDir`; a missing script or gnuplot is a note, not an error: the evaluation itself succeeded.
void plot(const std::string& trainDir, const std::string& outDir) {
  const char* custom = std::getenv("PSTRAIN_PLOT");
  std::string script = custom ? custom : PSTRAIN_TOOLS_DIR "/plot";
  if (!fs::exists(script)) {
    launcher::printErrorLine(fmt::format("pseval: --plot: {} not found; set PSTRAIN_PLOT to tools/plot", script));
    return;
  }
  auto quote = [](const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  };
  if (std::system((quote(script) + " " + quote(trainDir) + " " + quote(outDir)).c_str()) != 0) {
    launcher::printErrorLine(fmt::format("pseval: --plot: {} failed (is gnuplot installed?)", script));
  }
}

// Makes --out-dir and checks, before any checkpoint is read, that the results can be
// written there: a reader of a shared train dir it cannot write is told to give --out-dir.
void prepareOutDir(const launcher::EvalCommand& cmd) {
  std::error_code error;
  fs::create_directories(cmd.outDir, error);
  if (error) throw ConfigError(fmt::format("cannot create --out-dir {}: {}", cmd.outDir, error.message()));
  if (::access(cmd.outDir.c_str(), W_OK) != 0) {
    throw ConfigError(cmd.outDir == cmd.trainDir
                          ? fmt::format("cannot write {}/{} (the train dir is read-only for this user): give --out-dir "
                                        "DIR for the results", cmd.trainDir, rundir::kEvalCsv)
                          : fmt::format("cannot write into --out-dir {}", cmd.outDir));
  }
}

}  // namespace

// pseval's exit status when it evaluated what it could but skipped a checkpoint that failed
// its checks (1: it could not do its work at all; 2: bad flags).
constexpr int kSkippedExit = 3;

int main(int argc, char** argv) {
  if (const auto status = models::serveModelCheck(argc, argv)) return *status;
  launcher::EvalCommand cmd;
  try {
    cmd = launcher::parseEvalCommand(argc, argv);
  } catch (const ConfigError& e) {
    launcher::printErrorLine(fmt::format("pseval: error: {} (see pseval --help)", e.what()));
    return 2;
  }
  if (!cmd.helpText.empty()) {
    std::cout << cmd.helpText;
    return 0;
  }
  try {
    models::modelFilePolicy().trusted = cmd.trustModel;
    launcher::setComputeThreads(cmd.threads > 0 ? cmd.threads
                                                : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    if (!fs::is_directory(cmd.trainDir)) {
      throw ConfigError(fmt::format("{}: no such directory", cmd.trainDir));
    }
    if (!cmd.exportPath.empty()) {
      launcher::exportWeights(cmd);
      return 0;
    }
    prepareOutDir(cmd);
    Evaluator evaluator(cmd, launcher::chooseDevice(cmd.device, 0));
    const fs::path finalWeights = fs::path(cmd.trainDir) / rundir::kTrainedModel;
    auto lastNews = metrics::Clock::now();
    for (;;) {
      // Looked at before the pass: the final checkpoint is published before trained_model.pt.
      bool finished = fs::exists(finalWeights);
      if (evaluator.pass() > 0) lastNews = metrics::Clock::now();
      if (!cmd.follow || finished) break;
      double idle = metrics::secondsSince(lastNews);
      if (idle > cmd.idleTimeoutSeconds) {
        throw Error(fmt::format("no new checkpoint in {}/ckpt for {:.0f} s and no trained_model.pt: "
                                "is the training still running?", cmd.trainDir, idle));
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(cmd.pollSeconds));
    }
    if (evaluator.seen() == 0) {
      throw Error(fmt::format("{}/ckpt: no published checkpoints", cmd.trainDir));
    }
    if (cmd.plot) plot(cmd.trainDir, cmd.outDir);
    if (evaluator.skipped() > 0) {
      launcher::printErrorLine(fmt::format("pseval: {} checkpoint(s) could not be evaluated (exit {})",
                                           evaluator.skipped(), kSkippedExit));
      return kSkippedExit;
    }
  } catch (const InputError& e) {
    launcher::printErrorLine(fmt::format("pseval: error: {}", e.what()));
    return 2;
  } catch (const std::exception& e) {
    launcher::printErrorLine(fmt::format("pseval: error: {}", e.what()));
    return 1;
  }
  return 0;
}
