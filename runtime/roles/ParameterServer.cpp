#include "runtime/roles/ParameterServer.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>

#include "data/ShardSampler.h"
#include "runtime/Errors.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/metrics/JsonLines.h"
#include "runtime/metrics/Progress.h"
#include "runtime/optim/LrSchedule.h"
#include "runtime/optim/Sgd.h"
#include "runtime/roles/FlatParameters.h"
#include "runtime/roles/StepMessages.h"

namespace pstrain::roles {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Sums over the steps since the last log line.
struct Window {
  std::int64_t steps = 0;
  double lossSum = 0;  // over samples
  double samples = 0;
  double computeSeconds = 0;  // mean over workers, summed over steps
  double dataWaitSeconds = 0;  // likewise
  double exchangeSeconds = 0;
  double updateSeconds = 0;
  Clock::time_point start = Clock::now();
};

}  // namespace

ParameterServer::ParameterServer(comm::Communicator& comm, const config::TrainConfig& cfg,
                                 models::Net& model, std::int64_t trainSamples,
                                 const checkpoint::Checkpoint* resumeFrom)
    : comm_(comm), cfg_(cfg), model_(model), trainSamples_(trainSamples), resumeFrom_(resumeFrom) {}

void ParameterServer::run() {
  const int workers = comm_.size() - 1;
  const data::ShardSampler sampler(trainSamples_, workers, cfg_.batchSize, cfg_.seed);
  const std::int64_t total = config::totalSteps(cfg_, sampler.stepsPerEpoch());
  const std::int64_t n = models::parameterCount(model_);
  const std::int64_t m = bufferCount(model_);

  // The model's parameters are views into the down message: no copy before a broadcast.
  StepMessages messages(n, m);
  at::Tensor& weights = messages.weights;
  at::Tensor& buffers = messages.serverBuffers;
  at::Tensor& grad = messages.grad;
  bindParameters(model_, weights);
  readBuffers(model_, buffers);
  optim::Sgd sgd({cfg_.momentum, cfg_.weightDecay, cfg_.nesterov});
  const std::int64_t firstStep = resumeFrom_ ? resumeFrom_->step : 0;
  if (resumeFrom_ && !resumeFrom_->momentum.empty()) {
    std::map<std::string, at::Tensor> saved(resumeFrom_->momentum.begin(), resumeFrom_->momentum.end());
    std::vector<at::Tensor> parts;
    for (const auto& item : model_.named_parameters()) {
      auto it = saved.find(item.key());
      if (it == saved.end() || it->second.numel() != item.value().numel()) {
        throw CheckpointError(fmt::format("step {} checkpoint: no momentum buffer of the right size for '{}'",
                                          firstStep, item.key()));
      }
      parts.push_back(it->second.flatten().to(torch::kFloat32));
    }
    sgd.setMomentumBuffer(torch::cat(parts));
  }

  const fs::path dir(cfg_.trainDir);
  metrics::JsonLines log((dir / "metrics.jsonl").string());
  std::cout << fmt::format("pstrain: {} workers, {} steps ({} per epoch), model {} ({} parameters), "
                           "{} train samples, batch {} per worker{}",
                           workers, total, sampler.stepsPerEpoch(), cfg_.model, n, trainSamples_,
                           cfg_.batchSize, firstStep ? fmt::format("; resuming at step {}", firstStep) : "")
            << std::endl;

  auto makeCheckpoint = [&](std::int64_t stepsDone) {
    checkpoint::Checkpoint ckpt;
    ckpt.step = stepsDone;
    ckpt.epoch = sampler.epochOf(std::max<std::int64_t>(stepsDone - 1, 0));
    ckpt.model = cfg_.model;
    ckpt.dataset = cfg_.dataset;
    ckpt.syntheticSize = cfg_.syntheticSize;
    ckpt.fingerprint = cfg_.fingerprint();
    ckpt.modelState = models::stateDict(model_);
    if (sgd.momentumBuffer().defined()) {
      std::int64_t offset = 0;
      for (const auto& item : model_.named_parameters()) {
        std::int64_t size = item.value().numel();
        ckpt.momentum.emplace_back(item.key(), sgd.momentumBuffer().narrow(0, offset, size).view(item.value().sizes()));
        offset += size;
      }
    }
    return ckpt;
  };

  const auto runStart = Clock::now();
  Window window;
  std::int64_t skipped = 0;
  for (std::int64_t step = firstStep; step < total; ++step) {
    currentStep() = step;
    const double lr = optim::learningRate(cfg_, workers, step, total);
    const std::string context = fmt::format("step {}", step);
    messages.setHeader({step, sampler.epochOf(step), Control::Train, static_cast<float>(lr), 0});

    auto exchangeStart = Clock::now();
    comm_.broadcast(messages.down.data(), messages.downBytes(), 0, context);
    std::fill(messages.up.begin(), messages.up.end(), 0.0f);
    comm_.reduceSum(messages.up.data(), messages.up.size(), 0, context);
    double exchange = secondsSince(exchangeStart);

    const float* trailer = messages.trailer;
    const double samples = trailer[kSamples];
    const double lossSum = trailer[kLossSum];
    if (samples <= 0) throw Error(fmt::format("step {}: the workers sent no samples", step));
    // Workers stop the job themselves on a non-finite loss unless --skip-nonfinite; an
    // overflow can still appear only in the sum.
    const bool finite = trailer[kNonFinite] == 0 && std::isfinite(lossSum) &&
                        torch::isfinite(grad).all().item<bool>();
    auto updateStart = Clock::now();
    if (finite) {
      grad.div_(samples);
      sgd.step(weights, grad, lr);
      if (m > 0) {  // BatchNorm statistics: the workers' average, for the next step and checkpoints
        buffers.copy_(messages.workerBuffers).div_(workers);
        writeBuffers(model_, buffers);
      }
    } else if (cfg_.skipNonfinite) {
      ++skipped;
      std::cout << fmt::format("pstrain: step {}: non-finite loss or gradient ({} worker(s) reported one); "
                               "update skipped (--skip-nonfinite, {} so far)", step, trailer[kNonFinite], skipped)
                << std::endl;
    } else {
      throw Error(fmt::format("step {}: the summed gradient of the workers is not finite; lower --lr, or "
                              "--skip-nonfinite to drop such steps (the last good checkpoint is kept)", step));
    }
    double update = secondsSince(updateStart);

    window.steps += 1;
    if (finite) {
      window.lossSum += lossSum;
      window.samples += samples;
    }
    window.computeSeconds += trailer[kComputeSeconds] / workers;
    window.dataWaitSeconds += trailer[kDataWaitSeconds] / workers;
    window.exchangeSeconds += exchange;
    window.updateSeconds += update;

    const std::int64_t done = step + 1;
    if (done % cfg_.logEvery == 0 || done == total) {
      double wall = secondsSince(window.start);
      double steps = static_cast<double>(window.steps);
      metrics::StepProgress progress;
      progress.step = done;
      progress.total = total;
      progress.epoch = sampler.epochOf(step);
      progress.loss = window.samples > 0 ? window.lossSum / window.samples : NAN;
      progress.lr = lr;
      progress.samplesPerSecond = window.samples / wall;
      progress.firstStep = firstStep;
      progress.elapsedSeconds = secondsSince(runStart);
      metrics::JsonObject line;
      line.add("step", done).add("epoch", progress.epoch).add("loss", progress.loss);
      line.add("lr", lr).add("samples_per_s", progress.samplesPerSecond);
      line.add("compute_s", window.computeSeconds / steps);
      line.add("data_wait_s", window.dataWaitSeconds / steps);
      line.add("comm_s", std::max(0.0, (window.exchangeSeconds - window.computeSeconds) / steps));
      line.add("exchange_s", window.exchangeSeconds / steps);
      line.add("update_s", window.updateSeconds / steps);
      line.add("bytes_sent", static_cast<std::int64_t>(messages.downBytes()));
      line.add("bytes_received", static_cast<std::int64_t>(messages.upBytes()));
      line.add("elapsed_s", progress.elapsedSeconds);
      line.add("skipped_nonfinite", skipped);
      log.write(line);
      std::cout << metrics::progressLine(progress) << std::endl;
      window = Window();
    }
    if (cfg_.checkpointEvery > 0 && done % cfg_.checkpointEvery == 0 && done != total) {
      checkpoint::publish((dir / "ckpt").string(), makeCheckpoint(done));
    }
  }

  messages.setHeader({total, sampler.epochOf(std::max<std::int64_t>(total - 1, 0)), Control::Stop, 0, 0});
  comm_.broadcast(messages.down.data(), messages.downBytes(), 0, "stop");

  // The message buffers die with this call: hand the model weights of its own.
  bindParameters(model_, weights.clone());
  auto path = checkpoint::publish((dir / "ckpt").string(), makeCheckpoint(total));
  checkpoint::writeStateDict((dir / "trained_model.pt").string(), models::stateDict(model_));
  std::cout << fmt::format("pstrain: done in {}; final checkpoint {}, weights {}",
                           metrics::formatDuration(secondsSince(runStart)), path,
                           (dir / "trained_model.pt").string())
            << std::endl;
}

}  // namespace pstrain::roles
