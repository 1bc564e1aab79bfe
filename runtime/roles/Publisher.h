#pragma once
// Rank 0's outputs of a run, whatever the mode (DESIGN.md, "Files a run leaves"): the
// metrics.jsonl lines (and the same scalars in a TensorBoard event file) and progress lines, the checkpoints every --checkpoint-every steps,
// the final checkpoint and trained_model.pt.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "models/Registry.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/config/RunPlan.h"
#include "runtime/metrics/EventFile.h"
#include "runtime/metrics/Json.h"
#include "runtime/metrics/JsonLines.h"
#include "runtime/optim/LossScale.h"
#include "runtime/optim/Optimizer.h"
#include "runtime/roles/StepStats.h"

namespace pstrain::roles {

class Publisher {
 public:
  // `model`, `optimizer` and `lossScale` (null without loss scaling) are read whenever a
  // checkpoint or a metrics line is written. Steps count optimizer updates; an epoch is
  // `updatesPerEpoch` of them.
  Publisher(const config::RunPlan& cfg, const models::Net& model, const optim::Optimizer& optimizer,
            const optim::LossScale* lossScale, std::int64_t updatesPerEpoch, std::int64_t totalSteps,
            std::int64_t firstStep);

  std::int64_t epochOf(std::int64_t step) const { return step / updatesPerEpoch_; }
  double elapsedSeconds() const;  // since construction
  // Whether the run stops before update `next`: once --max-seconds has passed, a stop was
  // requested (stopRequested()), or with --stop-at N at N (a stop request then).
  bool timeToStop(std::int64_t next) const;

  // The mode's own fields (counters of its window), added to every metrics.jsonl line by
  // calling `extras` then; it must stay callable until finish() returns.
  void setExtras(std::function<void(metrics::JsonObject&)> extras) { extras_ = std::move(extras); }
  // Where the files it writes take the bytes of the model and of the optimizer state from
  // (checkpoint::RecordSource: K servers' ranges, gathered as they are written); it must stay
  // callable until finish() returns.
  void setRecordSource(checkpoint::RecordSource source) { source_ = std::move(source); }
  // What the mode adds to each checkpoint it writes (point to point: the workers' batches);
  // it must stay callable until finish() returns.
  void setCheckpointExtras(std::function<void(checkpoint::Checkpoint&)> extras) {
    checkpointExtras_ = std::move(extras);
  }

  // Adds "key": value to the run's run.json (written at start-up): what a mode learns of
  // the run once it runs (diloco's measured rounds). A run.json that cannot be rewritten is
  // reported and left as it was.
  void addToRunJson(const std::string& key, const metrics::JsonObject& value) const;

  // After update `step` (0-based), which ends the `steps` steps step - steps + 1 .. step (a
  // diloco round; 1 elsewhere): adds `stats` to the current window, whose per-step figures
  // then count those steps. Once the update passes a multiple of --log-every, and at the
  // last step, it writes a metrics.jsonl line and a progress line; it publishes a checkpoint
  // when it passes a multiple of --checkpoint-every. A checkpoint, line or record that
  // cannot be written (a full disk) is reported and skipped: training goes on.
  void record(std::int64_t step, double lr, const StepStats& stats, std::int64_t steps = 1);
  // Whether record(step, ..., steps) will publish a periodic checkpoint (so that what it
  // reads can be gathered first).
  bool checkpointsAt(std::int64_t step, std::int64_t steps = 1) const;

  // After the last update (`stepsDone` of them; fewer than planned after --max-seconds or a
  // stop request): logs what the window still holds, publishes the final checkpoint and
  // trained_model.pt (throwing when they cannot be written), except after a stop request, which leaves a run to resume (and sets
  // stoppedOnRequest()). Reads the extras (setExtras) once more: call it while what they
  // capture is alive.
  void finish(std::int64_t stepsDone);

 private:
  checkpoint::Checkpoint snapshot(std::int64_t stepsDone) const;
  void writeLine(std::int64_t stepsDone);

  const config::RunPlan& cfg_;
  const models::Net& model_;
  const optim::Optimizer& optimizer_;
  const optim::LossScale* lossScale_;
  std::int64_t updatesPerEpoch_;
  std::int64_t total_;
  std::int64_t firstStep_;
  metrics::JsonLines log_;
  checkpoint::RecordSource source_;
  std::unique_ptr<metrics::EventFile> events_;  // null with --tensorboard off
  struct {
    bool metrics = false, events = false;
  } failing_;  // the last write of each kind failed (a full disk): reported once
  double start_;  // steady clock seconds
  double windowStart_;
  double windowCpuStart_;  // rank 0's process CPU seconds at windowStart_
  std::int64_t windowSteps_ = 0;
  std::int64_t skipped_ = 0;
  double lastLr_ = 0;
  StepStats window_;  // sums over the window
  std::function<void(metrics::JsonObject&)> extras_;
  std::function<void(checkpoint::Checkpoint&)> checkpointExtras_;
};

}  // namespace pstrain::roles
