#include "runtime/Stop.h"
#include "models/StateDict.h"
#include "runtime/rundir/AtomicFile.h"
#include "runtime/roles/Publisher.h"

#include "runtime/protocol/StepProtocol.h"
#include "runtime/rundir/TrainDir.h"
#include "runtime/metrics/Clock.h"
#include "runtime/metrics/Startup.h"
#include "runtime/rundir/ReadFile.h"
#include "runtime/rundir/RunFiles.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <ctime>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>

#include "runtime/Errors.h"
#include "runtime/Portable.h"
#include "runtime/metrics/Progress.h"
#include "runtime/config/Flags.h"
#include "runtime/protocol/FlatParameters.h"

namespace pstrain::roles {

using namespace protocol;
namespace {

namespace fs = std::filesystem;

void add(StepStats& sum, const StepStats& s) {
  if (s.applied) {
    sum.lossSum += s.lossSum;
    sum.samples += s.samples;
  }
  sum.computeSeconds += s.computeSeconds;
  sum.slowestComputeSeconds += s.slowestComputeSeconds;
  sum.dataWaitSeconds += s.dataWaitSeconds;
  sum.exchangeSeconds += s.exchangeSeconds;
  sum.exchangeCpuSeconds += s.exchangeCpuSeconds;
  sum.updateSeconds += s.updateSeconds;
  sum.gradNorm += s.gradNorm;
  sum.codecSeconds += s.codecSeconds;
  sum.bytesDown += s.bytesDown;
  sum.rawBytesDown += s.rawBytesDown;
  sum.bytesUp += s.bytesUp;
  sum.rawBytesUp += s.rawBytesUp;
}

// A metrics.jsonl field's TensorBoard tag, grouped as a user looks at them: the training
// (train/), where a step's time goes (time/), what travels per message (wire/), what rank 0
// costs its host (rank0/). The step is the event's own; a field not listed (a mode's
// counters) goes under mode/.
std::string tensorBoardTag(const std::string& key) {
  static const std::map<std::string, std::string> tags = {
      {"step", ""},
      {"loss", "train/loss"},
      {"lr", "train/lr"},
      {"samples_per_s", "train/samples_per_s"},
      {"tokens_per_s", "train/tokens_per_s"},
      {"epoch", "train/epoch"},
      {"grad_norm", "train/grad_norm"},
      {"skipped_nonfinite", "train/skipped_nonfinite"},
      {"loss_scale", "train/loss_scale"},
      {"compute_s", "time/compute_s"},
      {"slowest_compute_s", "time/slowest_compute_s"},
      {"data_wait_s", "time/data_wait_s"},
      {"comm_s", "time/comm_s"},
      {"exchange_s", "time/exchange_s"},
      {"update_s", "time/update_s"},
      {"codec_s", "time/codec_s"},
      {"elapsed_s", "time/elapsed_s"},
      {"bytes_sent", "wire/bytes_sent"},
      {"bytes_received", "wire/bytes_received"},
      {"raw_bytes_sent", "wire/raw_bytes_sent"},
      {"raw_bytes_received", "wire/raw_bytes_received"},
      {"rank0_cpu_s", "rank0/cpu_s"},
      {"exchange_cpu_share", "rank0/exchange_cpu_share"},
      {"rank0_peak_rss_mib", "rank0/peak_rss_mib"},
  };
  const auto it = tags.find(key);
  return it != tags.end() ? it->second : "mode/" + key;
}

// Runs `write`, one of the run's periodic outputs (a checkpoint, a metrics line, an event
// record). A failure (a full disk) costs that output, not the run: it is reported, once
// until a write of its kind succeeds again (`failing`), and training goes on.
template <typename Write>
bool bestEffort(bool& failing, std::int64_t step, const char* what, Write&& write) {
  try {
    write();
    failing = false;
    return true;
  } catch (const Error& e) {
    if (!failing) {
      std::cerr << fmt::format("pstrain: step {}: {} not written, training goes on: {}", step, what, e.what())
                << std::endl;
    }
    failing = true;
    return false;
  }
}

metrics::Scalars tensorBoardScalars(const metrics::JsonObject& line) {
  metrics::Scalars scalars;
  for (const auto& [key, value] : line.numbers()) {
    std::string tag = tensorBoardTag(key);
    if (!tag.empty()) scalars.emplace_back(std::move(tag), value);
  }
  return scalars;
}

// Whether the updates that end at `done` (`steps` of them) passed a multiple of `every`.
bool passes(std::int64_t done, std::int64_t steps, std::int64_t every) {
  return every > 0 && done / every != (done - steps) / every;
}

}  // namespace

Publisher::Publisher(const config::RunPlan& cfg, const models::Net& model, const optim::Optimizer& optimizer,
                     const optim::LossScale* lossScale, std::int64_t updatesPerEpoch, std::int64_t totalSteps,
                     std::int64_t firstStep)
    : cfg_(cfg),
      model_(model),
      optimizer_(optimizer),
      lossScale_(lossScale),
      updatesPerEpoch_(std::max<std::int64_t>(1, updatesPerEpoch)),
      total_(totalSteps),
      firstStep_(firstStep),
      log_(rundir::pathOf(cfg.trainDir, rundir::kMetrics)),
      events_(cfg.tensorboard == config::OnOff::On ? std::make_unique<metrics::EventFile>(cfg.trainDir) : nullptr),
      start_(metrics::steadySeconds()),
      windowStart_(start_),
      windowCpuStart_(metrics::processCpuSeconds()) {}

double Publisher::elapsedSeconds() const { return metrics::steadySeconds() - start_; }

bool Publisher::timeToStop(std::int64_t next) const {
  if (cfg_.stopAt > 0 && next >= cfg_.stopAt && next < total_) stopRequested() = true;  // --stop-at: as SIGUSR1
  return stopRequested() || (cfg_.maxSeconds > 0 && elapsedSeconds() >= cfg_.maxSeconds);
}

bool Publisher::checkpointsAt(std::int64_t step, std::int64_t steps) const {
  return passes(step + 1, steps, cfg_.checkpointEvery) && step + 1 != total_;
}

void Publisher::record(std::int64_t step, double lr, const StepStats& stats, std::int64_t steps) {
  if (step - steps + 1 == firstStep_) metrics::Startup::process().firstStepDone();
  add(window_, stats);
  windowSteps_ += steps;
  lastLr_ = lr;
  if (!stats.applied) ++skipped_;
  const std::int64_t done = step + 1;
  if (passes(done, steps, cfg_.logEvery) || done == total_) writeLine(done);
  if (checkpointsAt(step, steps)) {
    // The last published checkpoint stays what --resume and pseval use; the final one is
    // tried at the end, and its failure is the run's.
    bool reportEach = false;
    if (bestEffort(reportEach, done, "checkpoint", [&] {
          checkpoint::publish(rundir::pathOf(cfg_.trainDir, rundir::kCheckpoints), snapshot(done), source_);
        })) {
      rundir::discardSetAside(cfg_.trainDir);  // the earlier run this one replaces goes now
    }
  }
}

void Publisher::writeLine(std::int64_t done) {
  const double wall = metrics::steadySeconds() - windowStart_;
  const double steps = static_cast<double>(windowSteps_);
  metrics::StepProgress progress;
  progress.step = done;
  progress.total = total_;
  progress.epoch = epochOf(done - 1);
  progress.loss = window_.samples > 0 ? window_.lossSum / window_.samples : NAN;
  progress.lr = lastLr_;
  progress.samplesPerSecond = window_.samples / wall;
  progress.tokensPerSample = cfg_.blockSize;
  progress.firstStep = firstStep_;
  progress.elapsedSeconds = elapsedSeconds();
  metrics::JsonObject line;
  line.add("step", done).add("epoch", progress.epoch).add("loss", progress.loss);
  line.add("lr", lastLr_).add("samples_per_s", progress.samplesPerSecond);
  if (cfg_.blockSize > 0) line.add("tokens_per_s", progress.samplesPerSecond * static_cast<double>(cfg_.blockSize));
  line.add("compute_s", window_.computeSeconds / steps);
  line.add("data_wait_s", window_.dataWaitSeconds / steps);
  line.add("slowest_compute_s", window_.slowestComputeSeconds / steps);
  // The exchange waits for the slowest batch of each step; what remains is communication.
  line.add("comm_s", std::max(0.0, (window_.exchangeSeconds - window_.slowestComputeSeconds) / steps));
  line.add("exchange_s", window_.exchangeSeconds / steps);
  line.add("update_s", window_.updateSeconds / steps);
  line.add("grad_norm", window_.gradNorm / steps);  // the averaged gradient's, before clipping; mean over the window
  // How much of a core rank 0 burns while it waits for the others (the server must not spin).
  line.add("exchange_cpu_share", window_.exchangeSeconds > 0 ? window_.exchangeCpuSeconds / window_.exchangeSeconds : 0.0);
  line.add("codec_s", window_.codecSeconds / steps);
  // Per step and per message: what travelled, and what it would have been unencoded.
  line.add("bytes_sent", static_cast<std::int64_t>(std::llround(window_.bytesDown / steps)));
  line.add("bytes_received", static_cast<std::int64_t>(std::llround(window_.bytesUp / steps)));
  line.add("raw_bytes_sent", static_cast<std::int64_t>(std::llround(window_.rawBytesDown / steps)));
  line.add("raw_bytes_received", static_cast<std::int64_t>(std::llround(window_.rawBytesUp / steps)));
  line.add("elapsed_s", progress.elapsedSeconds);
  line.add("skipped_nonfinite", skipped_);
  if (lossScale_) line.add("loss_scale", lossScale_->scale());  // for the next step's gradients
  const double cpu = metrics::processCpuSeconds();
  line.add("rank0_cpu_s", (cpu - windowCpuStart_) / steps);  // all of rank 0's threads, per step
  windowCpuStart_ = cpu;
  line.add("rank0_peak_rss_mib", portable::peakRssMib());  // does the server fit next to a worker?
  if (extras_) extras_(line);
  bestEffort(failing_.metrics, done, "metrics.jsonl line", [&] { log_.write(line); });
  if (events_) bestEffort(failing_.events, done, "TensorBoard record", [&] { events_->write(done, tensorBoardScalars(line)); });
  std::cout << metrics::progressLine(progress) << std::endl;
  window_ = StepStats();
  windowSteps_ = 0;
  windowStart_ = metrics::steadySeconds();
}

void Publisher::addToRunJson(const std::string& key, const metrics::JsonObject& value) const {
  const std::string path = rundir::pathOf(cfg_.trainDir, rundir::kRunJson);
  try {
    std::string run = rundir::readRegularFile(path, [&](const std::string& what) {
      throw CheckpointError(fmt::format("{}: {}", path, what));
    });
    const std::size_t end = run.rfind('}');
    if (end == std::string::npos) throw CheckpointError(fmt::format("{}: not a JSON object", path));
    run = run.substr(0, end) + "," + metrics::jsonQuote(key) + ":" + value.str() + "}\n";
    rundir::atomicWrite(path, run);
  } catch (const Error& e) {
    std::cout << fmt::format("pstrain: warning: could not add '{}' to run.json ({})", key, e.what()) << std::endl;
  }
}

void Publisher::finish(std::int64_t stepsDone) {
  if (windowSteps_ > 0) writeLine(stepsDone);
  const checkpoint::Checkpoint last = snapshot(stepsDone);
  auto path = checkpoint::publish(rundir::pathOf(cfg_.trainDir, rundir::kCheckpoints), last, source_);
  rundir::discardSetAside(cfg_.trainDir);
  if (stopRequested() && stepsDone < total_) {
    stoppedOnRequest() = true;
    std::cout << fmt::format("pstrain: stopped on request at step {} of {}; checkpoint {}; --resume continues",
                             stepsDone, total_, path) << std::endl;
    return;
  }
  const std::string weights = rundir::pathOf(cfg_.trainDir, rundir::kTrainedModel);
  const std::string scripted = rundir::pathOf(cfg_.trainDir, rundir::kTrainedScript);
  // The final checkpoint's weights, and its optimizer state beside them (torch.load: {name:
  // {key: tensor}, "step": N}) to go on training them elsewhere, through the same source.
  checkpoint::writeStateDict(weights, last.modelState, source_);
  if (!last.optimizerState.empty()) {
    checkpoint::writeOptimizerState(rundir::pathOf(cfg_.trainDir, rundir::kTrainedOptimizer), last, source_);
  }
  // A model of the user's, as TorchScript with the trained weights: torch.jit.load runs it.
  // Its tensors' bytes are written from where they are, through the same source.
  std::vector<checkpoint::MemoryRange> tensors;
  for (const auto& [key, t] : models::stateDict(model_)) {  // whole storages: a parameter views the flat weights
    if (t.device().is_cpu() && t.has_storage()) tensors.push_back({t.storage().data(), t.storage().nbytes()});
  }
  const bool script = checkpoint::writeArchive(
      scripted, [&](std::ostream& out) { return model_.saveTorchScript(out); }, tensors, source_);
  std::cout << fmt::format("pstrain: done in {}{}; final checkpoint {}, weights {}{}",
                           metrics::formatDuration(elapsedSeconds()),
                           stepsDone < total_ ? fmt::format(" (--max-seconds: {} of {} steps)", stepsDone, total_) : "",
                           path, weights, script ? " and " + scripted : "")
            << std::endl;
}

namespace {

// `tensor` aliased by a storage of its own (no copy), so that a written file gives it a
// record of its own rather than one record of the flat buffer it views. A tensor off the CPU,
// or an empty one, stays as it is.
at::Tensor ownStorage(const at::Tensor& tensor) {
  if (!tensor.device().is_cpu() || tensor.numel() == 0) return tensor;
  return at::from_blob(tensor.data_ptr(), tensor.sizes(), tensor.strides(), tensor.options());
}

// Each tensor of `tensors` aliased by a storage of its own (ownStorage), one per tensor: the
// names of one tensor (a tie) share it.
checkpoint::TensorList withOwnStorages(const checkpoint::TensorList& tensors) {
  checkpoint::TensorList out;
  std::map<const void*, at::Tensor> made;  // by the tensor's data
  for (const auto& [key, tensor] : tensors) {
    const void* data = tensor.numel() > 0 ? tensor.data_ptr() : nullptr;
    auto it = data ? made.find(data) : made.end();
    if (it == made.end()) {
      at::Tensor own = ownStorage(tensor);
      if (data) made.emplace(data, own);
      out.emplace_back(key, own);
    } else {
      out.emplace_back(key, it->second);
    }
  }
  return out;
}

}  // namespace

checkpoint::Checkpoint Publisher::snapshot(std::int64_t stepsDone) const {
  checkpoint::Checkpoint ckpt;
  ckpt.step = stepsDone;
  ckpt.epoch = epochOf(std::max<std::int64_t>(stepsDone - 1, 0));
  ckpt.model = cfg_.model;
  ckpt.dataset = cfg_.dataset;
  ckpt.syntheticSize = cfg_.syntheticSize;
  ckpt.loss = cfg_.lossFunction();
  const config::TrainConfig flags = cfg_.explicitFlags();  // its virtual shards and loss resolved by start-up
  ckpt.virtualShards = flags.virtualShards;
  ckpt.batchSize = cfg_.shardBatch();
  if (config::isModelFile(cfg_.model)) ckpt.modelPath = fs::absolute(cfg_.model).string();
  ckpt.fingerprint = cfg_.fingerprint();
  ckpt.optimizerRule = cfg_.updateRuleName();
  for (const auto& [name, value] : config::fingerprintFields(flags)) ckpt.configuration += name + "=" + value + "\n";
  // Each weight and each parameter's state a storage of its own: a record of the file each,
  // so that a RecordSource fills one parameter's bytes at a time. A tie's names share theirs,
  // as in PyTorch's torch.save(model.state_dict()).
  ckpt.modelState = withOwnStorages(models::stateDict(model_));
  const auto ties = model_.ties();
  for (const auto& [name, buffer] : optimizer_.state()) {
    const auto views = parameterViews(model_, buffer);
    checkpoint::TensorList tensors;
    std::size_t i = 0;
    for (const auto& item : model_.named_parameters()) tensors.emplace_back(item.key(), views[i++]);
    for (const auto& tie : ties) {  // (alias, the name it ties to)
      const auto it = std::find_if(tensors.begin(), tensors.end(), [&](const auto& t) { return t.first == tie.second; });
      if (it != tensors.end()) tensors.emplace_back(tie.first, it->second);  // a frozen tensor has no state
    }
    ckpt.optimizerState.emplace_back(name, withOwnStorages(tensors));
  }
  ckpt.optimizerSteps = optimizer_.updates();
  if (lossScale_) {
    ckpt.lossScale = checkpoint::Checkpoint::LossScale{lossScale_->scale(), lossScale_->goodSteps(),
                                                       lossScale_->growthInterval()};
  }
  ckpt.blockSize = cfg_.blockSize;
  ckpt.ignoreIndex = cfg_.ignoreIndex;
  ckpt.initFrom = cfg_.initFromIdentity;
  if (!cfg_.initFrom.empty()) ckpt.initFromPath = fs::absolute(cfg_.initFrom).string();
  ckpt.modelFacts = model_.facts().json;
  ckpt.ties = model_.ties();
  if (checkpointExtras_) checkpointExtras_(ckpt);
  return ckpt;
}

}  // namespace pstrain::roles
