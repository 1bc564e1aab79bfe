#include "runtime/roles/ServerLoop.h"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>

#include "runtime/protocol/FlatParameters.h"

namespace pstrain::roles {

using namespace protocol;

Server::Server(const RoleArgs& a, bool stepLink)
    : UpdateState(a.comm, a.cfg, a.model, a.trainSamples, a.resume ? a.resume->step : 0, c10::kCPU, a.cfg.seed,
                  stepLink),
      resumed(a.resume != nullptr),
      resumedBatches(a.resume ? a.resume->workerBatches : std::vector<std::int64_t>()) {
  // Resumed, the model holds the checkpoint's weights, all of them (training/startRun).
  bindParameters(model, messages.weights, resumed ? models::FlatSpan{} : model.heldWeights());
  readBuffers(model, messages.serverBuffers);
  if (a.resume) restoreUpdate(*this, *a.resume);
}

void Server::setHeader(std::int64_t step, Control control, double lr) {
  messages.setHeader({step, publisher->epochOf(std::min(step, std::max<std::int64_t>(total - 1, 0))), control,
                      static_cast<float>(lr), static_cast<float>(admission.lossScale()), 0});
}

StepStats Period::close(Server& s, int contributors, const UpdateTime& update, bool updateWithin, bool applied) {
  const auto end = metrics::Clock::now();
  const double cpuEnd = metrics::processCpuSeconds();
  StepStats stats = s.stats(contributors);
  stats.exchangeSeconds = std::chrono::duration<double>(end - start).count() - (updateWithin ? 0 : update.seconds);
  stats.exchangeCpuSeconds = cpuEnd - cpuStart - update.cpuSeconds;
  stats.updateSeconds = update.seconds;
  stats.applied = applied;
  start = end;
  cpuStart = cpuEnd;
  return stats;
}

void runServer(const RoleArgs& args, void (*loop)(Server&), std::string (*details)(const Server&), bool stepLink) {
  Server s(args, stepLink);
  const config::RunPlan& cfg = args.cfg;
  std::string modeText = cfg.modeInfo().name;
  const std::string said = details ? details(s) : "";
  if (!said.empty()) modeText += " (" + said + ")";
  std::cout << fmt::format("pstrain: {} mode, {} workers, {} steps ({} per epoch), model {} ({}), "
                           "{}, batch {} per worker{}{}",
                           modeText, s.computing, s.total, s.updatesPerEpoch, cfg.model, models::describeParameters(args.model),
                           cfg.describeTrainSet(args.trainSamples), cfg.describeBatch(),
                           s.shards != s.computing ? fmt::format(" and virtual shard ({} virtual shards: {} per step)",
                                                                 s.shards, s.shards * cfg.shardBatch()) : "",
                           s.firstStep ? fmt::format("; resuming at step {}", s.firstStep) : "")
            << std::endl;
  loop(s);
}

}  // namespace pstrain::roles
