#include "runtime/config/Flags.h"

#include <cxxopts.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <variant>

#include "runtime/Errors.h"
#include "runtime/Text.h"
#include "runtime/config/Codecs.h"
#include "runtime/config/Devices.h"
#include "runtime/config/Losses.h"
#include "runtime/config/Optimizers.h"

namespace pstrain::config {
namespace {

using Member = std::variant<std::string TrainConfig::*, std::int64_t TrainConfig::*, int TrainConfig::*,
                            double TrainConfig::*, bool TrainConfig::*, std::uint64_t TrainConfig::*,
                            Mode TrainConfig::*, Switch TrainConfig::*, OnOff TrainConfig::*,
                            MemoryUse TrainConfig::*>;

// How an agreed flag reads for `cfg`: its canonical value, "-" where cfg's mode does not use
// it, or nothing (left out, so that fingerprints from before the flag stay what they were).
using Reading = std::optional<std::string> (*)(const TrainConfig& cfg, const std::string& canonical);

struct Flag {
  const char* name;
  const char* group;
  std::string help;
  Member member;
  Agreement agreement;
  Reading reading;                    // null: the canonical value
  void (*check)(const TrainConfig&);  // throws ConfigError naming the flag; null: any value
  const char* implicitValue = nullptr;  // the value of the bare flag (--overlap-rounds), if it may stand alone
};

void requireOneOf(const char* flag, const std::string& value, const std::set<std::string>& allowed) {
  if (allowed.count(value)) return;
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  throw ConfigError(fmt::format("--{} '{}' is not one of: {}", flag, value, list));
}

// Readings of flags that only some modes (or datasets) use.
std::optional<std::string> whenAggregating(const TrainConfig& c, const std::string& v) {
  return c.modeInfo().quorum == Quorum::Aggregate ? v : "-";
}
std::optional<std::string> whenRetrying(const TrainConfig& c, const std::string& v) {
  return c.modeInfo().stale == StalePolicy::RetryAfter ? v : "-";
}
std::optional<std::string> whenGossiping(const TrainConfig& c, const std::string& v) {
  return c.modeInfo().exchange == Exchange::Gossip ? v : "-";
}
// diloco's flags: in the fingerprint of diloco runs only (older runs' stay what they were);
// the outer step's, "-" where the rounds are plainly averaged (localsgd).
std::optional<std::string> whenDiloco(const TrainConfig& c, const std::string& v) {
  return c.modeInfo().runsLocalRounds() ? std::optional<std::string>(v) : std::nullopt;
}
std::optional<std::string> whenOuterStep(const TrainConfig& c, const std::string& v) {
  return c.modeInfo().averages ? std::optional<std::string>("-") : whenDiloco(c, v);
}
// The outer step's flags do not apply where rounds are averaged: set, they are refused.
void requireOuterStep(const TrainConfig& c, const char* flag, bool atDefault) {
  require(atDefault || !c.modeInfo().averages,
          fmt::format("--{} sets diloco's outer step; --mode {} averages the workers' weights (use --mode diloco)",
                      flag, c.modeInfo().name));
}
std::optional<std::string> whenSynthetic(const TrainConfig& c, const std::string& v) {
  return c.dataset.rfind("synthetic", 0) == 0 ? v : "-";
}
std::optional<std::string> resolvedGradientCodec(const TrainConfig& c, const std::string&) { return c.gradientCodec(); }
std::optional<std::string> resolvedWeightCodec(const TrainConfig& c, const std::string&) { return c.weightCodec(); }
std::optional<std::string> resolvedBalance(const TrainConfig& c, const std::string&) {
  return std::string(c.balance() ? "true" : "false");  // as the flag read when it was a bool
}
// Flags newer than some runs: part of the fingerprint only away from their default, so that
// the fingerprints of runs from before them stay what they were.
std::optional<std::string> onlyWhenOn(const TrainConfig& c, const std::string& v) {
  return c.simulateComputeMs > 0 ? std::optional<std::string>(v) : std::nullopt;
}
std::optional<std::string> unlessDefault(const TrainConfig&, const std::string& v, const std::string& standard) {
  return v == standard ? std::nullopt : std::optional<std::string>(v);
}
std::optional<std::string> whenAdaptive(const TrainConfig& c, const std::string& v) {
  return optimizerInfo(c.optimizer).adaptive ? std::optional<std::string>(v) : std::nullopt;
}

using A = Agreement;

// clang-format off
const std::vector<Flag> kFlags = {
    // The rows marked Fingerprint are in the fingerprint's order: keep it (a checkpoint's
    // fingerprint is compared when a run resumes). Others may go anywhere; --help shows the
    // groups in kGroups' order, the flags of a group in this order.
    {"mode", "Modes", modeNames() + " (pstrain --list-modes; README, \"Training modes\")",
     &TrainConfig::mode, A::Fingerprint, nullptr, nullptr},
    {"aggregate", "Modes", "backup: apply a step once K gradients are in, drop later ones (0: workers - 1)",
     &TrainConfig::aggregate, A::Fingerprint, whenAggregating, [](const TrainConfig& c) {
       require(c.aggregate >= 0, fmt::format("--aggregate must be 1 or more, or 0 for workers - 1 (got {})", c.aggregate)); }},
    {"max-staleness", "Modes", "async: reject a gradient computed more than S updates ago; its worker recomputes (0: strict)",
     &TrainConfig::maxStaleness, A::Fingerprint, whenRetrying, [](const TrainConfig& c) {
       require(c.maxStaleness >= 0, fmt::format("--max-staleness must be 0 or more (got {})", c.maxStaleness));
       require(c.maxStaleness <= kMaxSteps, fmt::format("--max-staleness must be at most {} (got {})", kMaxSteps, c.maxStaleness)); }},
    {"fetch-probability", "Modes", "gossip: chance of averaging with a random peer after each batch",
     &TrainConfig::fetchProbability, A::Fingerprint, whenGossiping, [](const TrainConfig& c) {
       require(c.fetchProbability >= 0 && c.fetchProbability <= 1,
               fmt::format("--fetch-probability must be in [0, 1] (got {})", c.fetchProbability)); }},
    {"interpolation", "Modes", "gossip: constant:V | clock | loss (how far to move toward the peer)",
     &TrainConfig::interpolation, A::Fingerprint, whenGossiping, [](const TrainConfig& c) { c.gossipInterpolation(); }},
    {"divergence-threshold", "Modes", "gossip: below this loss, damp the averaging by loss / T (0: off)",
     &TrainConfig::divergenceThreshold, A::Fingerprint, whenGossiping, [](const TrainConfig& c) {
       require(std::isfinite(c.divergenceThreshold) && c.divergenceThreshold >= 0,
               fmt::format("--divergence-threshold must be 0 (off) or a positive number (got {})", c.divergenceThreshold)); }},
    {"peer-timeout-ms", "Modes", "gossip: a peer whose read takes longer is picked less often",
     &TrainConfig::peerTimeoutMs, A::HostLocal, nullptr, [](const TrainConfig& c) {
       require(std::isfinite(c.peerTimeoutMs) && c.peerTimeoutMs > 0 && c.peerTimeoutMs <= kMaxSeconds * 1000,
               fmt::format("--peer-timeout-ms must be a positive number of at most {} (got {})", kMaxSeconds * 1000,
                           c.peerTimeoutMs)); }},
    {"local-steps", "Modes",
     "diloco: inner optimizer steps each worker runs alone between two exchanges (H), or auto: measured in the "
     "first rounds (of 10 steps), the H in [10, 500] of the shortest predicted time to a loss: longer rounds send "
     "less but need more steps (with overlapped rounds: the fewest whose compute hides the exchange)",
     &TrainConfig::localStepsFlag, A::Fingerprint, whenDiloco, [](const TrainConfig& c) { c.fixedLocalSteps(); }},
    {"outer-lr", "Modes", "diloco: the outer optimizer's learning rate on the averaged pseudo-gradient",
     &TrainConfig::outerLr, A::Fingerprint, whenOuterStep, [](const TrainConfig& c) {
       requireOuterStep(c, "outer-lr", c.outerLr == TrainConfig().outerLr);
       require(std::isfinite(c.outerLr) && c.outerLr > 0 && c.outerLr <= 10,
               fmt::format("--outer-lr must be in (0, 10] (got {})", c.outerLr)); }},
    {"outer-momentum", "Modes", "diloco: the outer optimizer's momentum (0: plain averaging steps)",
     &TrainConfig::outerMomentum, A::Fingerprint, whenOuterStep, [](const TrainConfig& c) {
       requireOuterStep(c, "outer-momentum", c.outerMomentum == TrainConfig().outerMomentum);
       require(std::isfinite(c.outerMomentum) && c.outerMomentum >= 0 && c.outerMomentum < 1,
               fmt::format("--outer-momentum must be in [0, 1) (got {})", c.outerMomentum)); }},
    {"overlap-rounds", "Modes",
     "diloco: on | off | auto: start each round from the local weights while the last round's exchange travels, "
     "and move the round's progress onto the new global weights as soon as they are in; auto: on where the first "
     "rounds predict that it reaches a loss sooner (bare --overlap-rounds: on)",
     &TrainConfig::overlapRoundsFlag, A::Fingerprint, whenDiloco, [](const TrainConfig& c) {
       require(c.overlapRoundsFlag != Switch::On || c.modeInfo().runsLocalRounds(),
               "--overlap-rounds overlaps the rounds of local steps: --mode diloco or localsgd only"); }, "on"},
    {"fragments", "Modes",
     "diloco: auto | P: streamed rounds: the weights cut into P fragments, an overlapped round exchanges one of them "
     "in turn (each fragment every P rounds, its exchange a P-th of the model's); H (--local-steps) stays the steps "
     "between two exchanges of a fragment, a round is H / P of them. 1: every round exchanges the whole model; auto: "
     "2 with one server where rounds may overlap, else 1",
     &TrainConfig::fragmentsFlag, A::Compared, nullptr, [](const TrainConfig& c) {
       const int fragments = c.fixedFragments();
       require(fragments <= 1 || c.modeInfo().runsLocalRounds(),
               "--fragments cuts the exchange of the rounds of local steps: --mode diloco or localsgd only");
       require(fragments <= 1 || c.overlapRoundsFlag != Switch::Off,
               "--fragments streams the exchange of overlapped rounds: --overlap-rounds off refuses it");
       require(fragments <= 1 || c.servers == 1,
               fmt::format("--fragments {} streams the rounds through one server: --servers {} refuses it", fragments,
                           c.servers)); }},
    {"outer-optimizer", "Modes", "diloco: " + outerOptimizerNames() + " (rank 0's rule on the averaged pseudo-gradient)",
     &TrainConfig::outerOptimizer, A::Fingerprint, whenOuterStep, [](const TrainConfig& c) {
       requireOuterStep(c, "outer-optimizer", c.outerOptimizer == TrainConfig().outerOptimizer);
       outerOptimizerInfo(c.outerOptimizer); }},

    {"compress", "Compression",
     "gradients (worker -> server, allreduce): auto (diloco: " + std::string(kFrugalCodec) + ", else none), " +
         codecSpecs(false),
     &TrainConfig::compress, A::Fingerprint, resolvedGradientCodec, [](const TrainConfig& c) {
       checkedCodec(c.gradientCodec(), false, "compress");
       require(c.modeInfo().exchange != Exchange::Gossip || (!c.compressesGradients() && !c.compressesWeights()),
               fmt::format("--mode {} reads peers' weights one-sidedly: --compress and --compress-weights do not apply",
                           c.modeInfo().name)); }},
    {"compress-weights", "Compression",
     "weights (server -> worker): auto (diloco: " + std::string(kFrugalCodec) + " updates unless --compress none, "
     "else none), " + codecSpecs(true),
     &TrainConfig::compressWeights, A::Fingerprint, resolvedWeightCodec, [](const TrainConfig& c) {
       checkedCodec(c.weightCodec(), true, "compress-weights");
       require(!c.modeInfo().peers() || !c.compressesWeights(),
               fmt::format("--mode {} sends no weights: --compress-weights does not apply (--compress does)",
                           c.modeInfo().name)); }},
    {"error-feedback", "Compression", "auto (on for " + errorFeedbackDefaults() + ") | on | off: add what was not sent to the next gradient",
     &TrainConfig::errorFeedback, A::Fingerprint, nullptr, nullptr},

    {"train-dir", "Run", "where run.json, metrics.jsonl, ckpt/ and trained_model.pt go",
     &TrainConfig::trainDir, A::HostLocal, nullptr, [](const TrainConfig& c) {
       require(!c.trainDir.empty(), "--train-dir must not be empty"); }},
    {"overwrite", "Run", "replace an earlier run in --train-dir",
     &TrainConfig::overwrite, A::HostLocal, nullptr, [](const TrainConfig& c) {
       require(!(c.resume && c.overwrite), "--resume continues the run in --train-dir, --overwrite replaces it: choose one"); }},
    {"resume", "Run", "continue the run in --train-dir from its newest valid checkpoint (same result as an uninterrupted run)",
     &TrainConfig::resume, A::Compared, nullptr, nullptr},
    {"trust-model", "Model and data",
     "run a model file whose code reads or writes files or reaches other machines (aten::save, aten::from_file, "
     "rpc); without it such a file is refused: a model file is a program",
     &TrainConfig::trustModel, A::Compared, nullptr, nullptr},
    {"skip-nonfinite", "Run", "drop and count a step whose loss or averaged gradient is NaN/inf instead of stopping",
     &TrainConfig::skipNonfinite, A::Compared, nullptr, nullptr},
    {"inject-nan", "Run", "testing: RANK:STEP makes worker RANK's loss NaN at STEP (async, diloco: its own batch STEP, counted from 0)",
     &TrainConfig::injectNan, A::HostLocal, nullptr, [](const TrainConfig& c) { c.nanInjection(); }},
    {"inject-overflow", "Run",
     "testing: RANK:STEP makes worker RANK's gradient +inf at STEP (async, diloco: its own batch STEP, counted from 0), as "
     "a float16 backward whose loss scale is too large",
     &TrainConfig::injectOverflow, A::HostLocal, nullptr, [](const TrainConfig& c) { c.overflowInjection(); }},
    {"max-seconds", "Run", "stop training after this many seconds and write the final files (0: no limit)",
     &TrainConfig::maxSeconds, A::Fingerprint, nullptr, [](const TrainConfig& c) {
       require(std::isfinite(c.maxSeconds) && c.maxSeconds >= 0 && c.maxSeconds <= kMaxSeconds,
               fmt::format("--max-seconds must be 0 (no limit) or a number of seconds up to {} (got {})", kMaxSeconds,
                           c.maxSeconds)); }},
    {"overlap", "Run",
     "sync: on | off: reduce gradient buckets while backward still runs, update each as it arrives (with --servers "
     "above 1: each server updates each 4 MiB part of its range as it arrives, holding no sum of its range)",
     &TrainConfig::overlap, A::Fingerprint, nullptr, nullptr},
    {"servers", "Run",
     "sync, backup, async, diloco, localsgd: K parameter servers, ranks 0..K-1, each owning 1/K of the weights (by "
     "bytes) and of the (outer) optimizer state; the other ranks are workers. Each server's link then carries 1/K of "
     "the traffic: put one server per host (mpirun --map-by node; docs/modes.md)",
     &TrainConfig::servers, A::Compared, nullptr, [](const TrainConfig& c) {
       require(c.servers >= 1 && c.servers <= 1024, fmt::format("--servers must be in [1, 1024] (got {})", c.servers));
       require(c.servers == 1 || !c.modeInfo().peers(),
               fmt::format("--servers {} shards the server of sync, backup, async, diloco and localsgd; --mode {} has "
                           "no server (use one of those modes, or --servers 1)", c.servers, c.modeInfo().name)); }},
    {"stack-servers", "Run",
     "--servers: allow two servers on one host while another host has none (refused otherwise: they would share one link)",
     &TrainConfig::stackServers, A::Compared, nullptr, nullptr},
    {"memory", "Run",
     "auto | fast | lean: what each host's ranks keep between steps. fast: a worker keeps its whole gradient buffer "
     "and a server takes every worker's parts at once, so that sends overlap backward and nothing is faulted in again "
     "each step; lean: each gradient bucket's pages go back once sent and a server takes two parts per worker at a "
     "time (the least memory, slower on fast links); auto: fast on each host where the memory plan under fast stays "
     "within half of its memory (--dry-run and --doctor say which and why), else lean with as much more in flight as "
     "the rest of that half allows",
     &TrainConfig::memory, A::Compared, nullptr, nullptr},
    {"bucket-kb", "Run", "overlap: gradient bucket size in KiB",
     &TrainConfig::bucketKb, A::Fingerprint, nullptr, [](const TrainConfig& c) {
       require(c.bucketKb >= 1 && c.bucketKb <= (1 << 20),
               fmt::format("--bucket-kb must be in [1, {}] (1 GiB; got {})", 1 << 20, c.bucketKb)); }},

    {"model", "Model and data",
     "model: mlp, convnet, lenet, resnet20..110, resnet18..152, vgg11..19 (see --list-models), or a TorchScript file of "
     "your own (a path, or a name ending in .pt/.pth)", &TrainConfig::model, A::Fingerprint, nullptr, nullptr},
    {"dataset", "Model and data",
     "dataset: fashion-mnist, mnist, cifar10, cifar100, synthetic, synthetic-cifar (see --list-datasets), or a NumPy "
     ".npz file (x_train, y_train, x_test, y_test)", &TrainConfig::dataset, A::Fingerprint, nullptr, nullptr},
    {"loss", "Model and data",
     "auto | " + lossNames(true) + "; auto: the model's own where its forward takes the targets (forward(x, y), "
     "as nanoGPT's), else mse for float targets, else nll for the zoo and cross-entropy for a model file; over the "
     "last dimension of every position when the targets are [N, L]",
     &TrainConfig::loss, A::Fingerprint, nullptr, [](const TrainConfig& c) {
       if (c.loss == "auto") return;
       const LossInfo& row = lossInfo(c.loss);
       require(row.zooOutputs || isModelFile(c.model),
               fmt::format("--loss {} needs a model of your own (--model FILE): the zoo's models {}", c.loss,
                           row.own ? "compute no loss of their own" : "output class log-probabilities")); }},
    {"data-dir", "Model and data",
     "dataset folder (default: the dataset's folder in $PSTRAIN_DATA_DIR, else in /usr/share/datasets; see --list-datasets)",
     &TrainConfig::dataDir, A::HostLocal, nullptr, nullptr},
    {"synthetic-size", "Model and data", "training samples of the synthetic datasets",
     &TrainConfig::syntheticSize, A::Fingerprint, whenSynthetic, [](const TrainConfig& c) {
       require(c.syntheticSize > 0 && c.syntheticSize <= 5'000'000,
               fmt::format("--synthetic-size must be in [1, 5000000] (got {})", c.syntheticSize)); }},

    {"batch-size", "Optimization", "samples per worker (virtual shard) per micro-batch",
     &TrainConfig::batchSize, A::Fingerprint, nullptr, [](const TrainConfig& c) {
       require(c.batchSize > 0 && c.batchSize <= 1'000'000, fmt::format("--batch-size must be in [1, 1000000] (got {})", c.batchSize)); }},
    {"virtual-shards", "Optimization",
     "sync, allreduce: deal each step's global batch to V virtual shards of --batch-size, whoever computes them, so "
     "that the result does not depend on how many workers there are (0: the first launch's workers; --resume keeps the run's)",
     &TrainConfig::virtualShards, A::Fingerprint, nullptr, [](const TrainConfig& c) {
       require(c.virtualShards >= 0 && c.virtualShards <= 65536,
               fmt::format("--virtual-shards must be 0 (the workers of the first launch) or up to 65536 (got {})", c.virtualShards)); }},
    {"reshard", "Optimization",
     "--resume may change the virtual shards or the batch size (the data order, global batch and lr change)",
     &TrainConfig::reshard, A::HostLocal, nullptr, nullptr},
    {"balance", "Optimization",
     "on | off | auto (on in diloco): sync: deal each step's virtual shards to the workers in proportion to their "
     "measured speed (same weights; hosts of different speeds finish together); diloco: deal each round's local steps "
     "in proportion to the workers' speed (a fast host does more of them instead of waiting); bare --balance: on",
     &TrainConfig::balanceFlag, A::Fingerprint, resolvedBalance, [](const TrainConfig& c) {
       require(c.balanceFlag != Switch::On || c.modeInfo().exchange == Exchange::Collective || c.modeInfo().runsLocalRounds(),
               "--balance deals a sync step's virtual shards, or a round's local steps, by speed: --mode sync, diloco "
               "or localsgd only"); }, "on"},
    {"lr", "Optimization", "base learning rate (one worker)",
     &TrainConfig::lr, A::Fingerprint, nullptr, [](const TrainConfig& c) {
       require(std::isfinite(c.lr) && c.lr > 0, fmt::format("--lr must be a positive number (got {})", c.lr)); }},
    {"lr-scaling", "Optimization",
     "none | linear (the Linear Scaling Rule: lr x the batches behind one update: the virtual shards in sync and "
     "allreduce (one per worker unless --virtual-shards), --aggregate in backup, 1 in async, gossip, diloco and "
     "localsgd)",
     &TrainConfig::lrScaling, A::Fingerprint, nullptr, [](const TrainConfig& c) {
       requireOneOf("lr-scaling", c.lrScaling, {"none", "linear"}); }},
    {"warmup-steps", "Optimization", "ramp the lr linearly up to its target over this many steps",
     &TrainConfig::warmupSteps, A::Fingerprint, nullptr, [](const TrainConfig& c) {
       require(c.warmupSteps >= 0 && c.warmupSteps <= kMaxSteps,
               fmt::format("--warmup-steps must be in [0, {}] (got {})", kMaxSteps, c.warmupSteps)); }},
    {"lr-decay", "Optimization", "none | cosine (after warm-up, half a cosine down to 0 at the last step)",
     &TrainConfig::lrDecay, A::Fingerprint, nullptr, [](const TrainConfig& c) {
       requireOneOf("lr-decay", c.lrDecay, {"none", "cosine"}); }},
    {"momentum", "Optimization", "sgd: momentum (torch.optim.SGD semantics)",
     &TrainConfig::momentum, A::Fingerprint, nullptr, [](const TrainConfig& c) {
       require(std::isfinite(c.momentum) && c.momentum >= 0 && c.momentum < 1,
               fmt::format("--momentum must be in [0, 1) (got {})", c.momentum)); }},
    {"nesterov", "Optimization", "sgd: Nesterov momentum",
     &TrainConfig::nesterov, A::Fingerprint, nullptr, [](const TrainConfig& c) {
       require(!c.nesterov || c.momentum > 0, "--nesterov needs a positive --momentum"); }},
    {"weight-decay", "Optimization", "sgd, adam: an L2 penalty added to the gradient; adamw: decoupled (the weights shrink by lr x it)",
     &TrainConfig::weightDecay, A::Fingerprint, nullptr, [](const TrainConfig& c) {
       require(std::isfinite(c.weightDecay) && c.weightDecay >= 0,
               fmt::format("--weight-decay must be 0 or more (got {})", c.weightDecay)); }},
    {"steps", "Optimization", "optimizer steps (overrides --epochs when > 0)",
     &TrainConfig::steps, A::Fingerprint, nullptr, [](const TrainConfig& c) {
       require(c.steps >= 0 && c.steps <= kMaxSteps, fmt::format("--steps must be in [0, {}] (got {})", kMaxSteps, c.steps)); }},
    {"epochs", "Optimization", "passes over the training set",
     &TrainConfig::epochs, A::Fingerprint, nullptr, [](const TrainConfig& c) {
       require(c.epochs >= 0 && c.epochs <= kMaxSteps, fmt::format("--epochs must be in [0, {}] (got {})", kMaxSteps, c.epochs));
       require(c.steps > 0 || c.epochs > 0, "give a positive --steps or --epochs"); }},

    {"checkpoint-every", "Run", "publish a checkpoint every N steps (0: only the final one)",
     &TrainConfig::checkpointEvery, A::Fingerprint, nullptr, [](const TrainConfig& c) {
       require(c.checkpointEvery >= 0 && c.checkpointEvery <= kMaxSteps,
               fmt::format("--checkpoint-every must be 0 (final only) or up to {} (got {})", kMaxSteps, c.checkpointEvery)); }},
    {"log-every", "Run", "progress line and metrics.jsonl record every N steps",
     &TrainConfig::logEvery, A::HostLocal, nullptr, [](const TrainConfig& c) {
       require(c.logEvery > 0 && c.logEvery <= kMaxSteps, fmt::format("--log-every must be in [1, {}] (got {})", kMaxSteps, c.logEvery)); }},
    {"threads", "Run", "intra-op threads per rank: a worker's forward and backward, the server's optimizer update (0: cores / ranks on the host)",
     &TrainConfig::threads, A::HostLocal, nullptr, [](const TrainConfig& c) {
       require(c.threads >= 0 && c.threads <= 1024, fmt::format("--threads must be 0 (auto) or up to 1024 (got {})", c.threads)); }},
    {"server-threads", "Run",
     "intra-op threads of a rank 0 that does not compute (the parameter server's optimizer update; 0: as --threads): "
     "in sync mode the workers wait for its update, so it may take their cores meanwhile",
     &TrainConfig::serverThreads, A::HostLocal, nullptr, [](const TrainConfig& c) {
       require(c.serverThreads >= 0 && c.serverThreads <= 1024,
               fmt::format("--server-threads must be 0 (as --threads) or up to 1024 (got {})", c.serverThreads)); }},
    {"device", "Run", deviceNames() + " (auto: MPS, else CUDA, else CPU)",
     &TrainConfig::device, A::HostLocal, nullptr, [](const TrainConfig& c) { deviceInfo(c.device); }},
    {"timeout", "Run", "seconds any rank waits for the others before giving up",
     &TrainConfig::timeoutSeconds, A::HostLocal, nullptr, [](const TrainConfig& c) {
       require(std::isfinite(c.timeoutSeconds) && c.timeoutSeconds > 0 && c.timeoutSeconds <= kMaxSeconds,
               fmt::format("--timeout must be a positive number of seconds up to {} (30 days; got {})", kMaxSeconds,
                           c.timeoutSeconds)); }},
    {"doorbell", "Run", "on | off: UDP wake-up datagrams between ranks (a hint that shortens waits; trusted networks only)",
     &TrainConfig::doorbell, A::HostLocal, nullptr, nullptr},
    {"tensorboard", "Run", "on | off: rank 0 writes metrics.jsonl's scalars to a TensorBoard event file in the train dir",
     &TrainConfig::tensorboard, A::HostLocal, nullptr, nullptr},
    {"stall-warning", "Run",
     "a rank that waits this many seconds for the others names those that have not arrived, and again every "
     "interval (capped by --timeout; 0: never)",
     &TrainConfig::stallWarningSeconds, A::HostLocal, nullptr, [](const TrainConfig& c) {
       require(std::isfinite(c.stallWarningSeconds) && c.stallWarningSeconds >= 0 && c.stallWarningSeconds <= kMaxSeconds,
               fmt::format("--stall-warning must be 0 (off) or seconds up to {} (got {})", kMaxSeconds,
                           c.stallWarningSeconds)); }},
    {"straggle", "Run", "testing: RANK:MS makes rank RANK sleep MS ms after each batch (per virtual shard it computes); "
                  "a comma-separated list slows several ranks",
     &TrainConfig::straggle, A::HostLocal, nullptr, [](const TrainConfig& c) { c.straggleMilliseconds(0); }},
    {"stop-at", "Run",
     "testing: after step N, stop as SIGUSR1 stops a job (a checkpoint, then exit 3: --resume continues), so that an "
     "elastic test changes its workers at a known step (0: never)",
     &TrainConfig::stopAt, A::HostLocal, nullptr, [](const TrainConfig& c) {
       require(c.stopAt >= 0 && c.stopAt <= kMaxSteps, fmt::format("--stop-at must be in [0, {}] (got {})", kMaxSteps,
                                                                   c.stopAt)); }},
    {"seed", "Optimization", "seed of weights and data order", &TrainConfig::seed, A::Fingerprint, nullptr, nullptr},
    {"simulate-compute", "Run",
     "benchmarks of the protocol at scale: every computing rank sleeps MS ms per batch instead of forward/backward "
     "and sends a random gradient of the model's size (learns nothing)",
     &TrainConfig::simulateComputeMs, A::Fingerprint, onlyWhenOn, [](const TrainConfig& c) {
       require(std::isfinite(c.simulateComputeMs) && c.simulateComputeMs >= 0 && c.simulateComputeMs <= 3.6e6,
               fmt::format("--simulate-compute must be 0 (off) or milliseconds up to 3600000 (got {})", c.simulateComputeMs)); }},
    // Newer flags, in the fingerprint only away from their defaults (unlessDefault).
    {"block-size", "Model and data",
     "a token file's (--dataset DIR/train.bin) window of L tokens: a sample is L ids, its targets the next L",
     &TrainConfig::blockSize, A::Fingerprint,
     [](const TrainConfig& c, const std::string& v) { return unlessDefault(c, v, "0"); }, [](const TrainConfig& c) {
       require(c.blockSize >= 0 && c.blockSize <= (1 << 24),
               fmt::format("--block-size must be 0 (not a token file) or up to {} (got {})", 1 << 24, c.blockSize));
       require(c.blockSize == 0 || isTokenFile(c.dataset),
               fmt::format("--block-size {} takes a token file: --dataset DIR/train.bin (nanoGPT) or an llm.c .bin "
                           "(got --dataset {})", c.blockSize, c.dataset));
       require(c.blockSize > 0 || !isTokenFile(c.dataset),
               fmt::format("--dataset {} is a token file: give its window length, --block-size L", c.dataset)); }},
    {"ignore-index", "Model and data", "a target of this value adds no loss and no accuracy (padding), as in PyTorch",
     &TrainConfig::ignoreIndex, A::Fingerprint,
     [](const TrainConfig& c, const std::string& v) { return unlessDefault(c, v, "-100"); }, nullptr},
    {"optimizer", "Optimization", optimizerNames() + " (torch.optim's; on the server, or every rank of the peer modes)",
     &TrainConfig::optimizer, A::Fingerprint,
     [](const TrainConfig& c, const std::string& v) { return unlessDefault(c, v, "sgd"); }, [](const TrainConfig& c) {
       optimizerInfo(c.optimizer); }},
    {"betas", "Optimization", "adam, adamw: B1,B2 (the moments' decay rates)",
     &TrainConfig::betas, A::Fingerprint, whenAdaptive, [](const TrainConfig& c) { c.adamBetas(); }},
    {"eps", "Optimization", "adam, adamw: added to the denominator",
     &TrainConfig::eps, A::Fingerprint, whenAdaptive, [](const TrainConfig& c) {
       require(std::isfinite(c.eps) && c.eps > 0 && c.eps < 1, fmt::format("--eps must be in (0, 1) (got {})", c.eps)); }},
    {"clip-grad-norm", "Optimization",
     "clip the averaged gradient's global L2 norm to MAX before the update, as torch.nn.utils.clip_grad_norm_ (0: off)",
     &TrainConfig::clipGradNorm, A::Fingerprint,
     [](const TrainConfig& c, const std::string& v) { return unlessDefault(c, v, "0"); }, [](const TrainConfig& c) {
       require(std::isfinite(c.clipGradNorm) && c.clipGradNorm >= 0,
               fmt::format("--clip-grad-norm must be 0 (off) or a positive number (got {})", c.clipGradNorm)); }},
    {"grad-accum", "Optimization",
     "gradient accumulation: each worker (virtual shard) runs K micro-batches of --batch-size before its gradient goes "
     "up, the update of --batch-size B x K (the same samples, in the same order) with the activations of B; BatchNorm "
     "normalizes each micro-batch",
     &TrainConfig::gradAccum, A::Fingerprint,
     [](const TrainConfig& c, const std::string& v) { return unlessDefault(c, v, "1"); }, [](const TrainConfig& c) {
       require(c.gradAccum >= 1 && c.gradAccum <= 65536, fmt::format("--grad-accum must be in [1, 65536] (got {})", c.gradAccum));
       require(c.shardBatch() <= 1'000'000, fmt::format("--batch-size x --grad-accum must be at most 1000000 (got {} x {})",
                                                        c.batchSize, c.gradAccum)); }},
    {"precision", "Optimization",
     precisionNames() + ": what the workers compute the forward pass in (bf16, fp16: torch.autocast's; the "
     "weights, gradients and the optimizer stay float32); bf16-weights: bf16, and the workers hold the weights in "
     "bfloat16 (half their memory), the servers float32 master weights and the optimizer",
     &TrainConfig::precision, A::Fingerprint,
     [](const TrainConfig& c, const std::string& v) { return unlessDefault(c, v, "fp32"); }, [](const TrainConfig& c) {
       if (!precisionInfo(c.precision).bf16Weights) return;
       const Exchange exchange = c.modeInfo().exchange;
       require(exchange == Exchange::Collective || exchange == Exchange::PointToPoint,
               fmt::format("--precision bf16-weights takes a mode with servers that keep the float32 master weights: "
                           "sync, backup or async (got --mode {})", c.modeInfo().name));
       require(!c.compressesWeights(), "--precision bf16-weights sends the weights as bfloat16 itself: drop "
                                       "--compress-weights"); }},
    {"loss-scale", "Optimization",
     "auto | dynamic | none: dynamic multiplies each worker's loss by a scale before backward and divides the "
     "gradient by it again, skips an update whose gradient overflowed and halves the scale, doubles it after "
     "--loss-scale-window good updates (torch.cuda.amp.GradScaler's rule, from 65536); auto: dynamic with "
     "--precision fp16",
     &TrainConfig::lossScale, A::Fingerprint,
     [](const TrainConfig& c, const std::string& v) { return unlessDefault(c, v, "auto"); }, [](const TrainConfig& c) {
       requireOneOf("loss-scale", c.lossScale, {"auto", "dynamic", "none"}); }},
    {"loss-scale-window", "Optimization", "good updates in a row before the loss scale doubles (GradScaler's growth_interval)",
     &TrainConfig::lossScaleWindow, A::Fingerprint,
     [](const TrainConfig& c, const std::string& v) { return unlessDefault(c, v, "2000"); }, [](const TrainConfig& c) {
       require(c.lossScaleWindow >= 1 && c.lossScaleWindow <= kMaxSteps,
               fmt::format("--loss-scale-window must be in [1, {}] (got {})", kMaxSteps, c.lossScaleWindow)); }},
    {"weight-decay-scope", "Optimization",
     decayScopeNames() + ": the tensors --weight-decay falls on; " + decayScopeNames(/*withHelp=*/true),
     &TrainConfig::weightDecayScope, A::Fingerprint,
     [](const TrainConfig& c, const std::string& v) { return unlessDefault(c, v, decayScopes().front().name); },
     [](const TrainConfig& c) { decayScopeInfo(c.weightDecayScope); }},
    {"init-from", "Model and data",
     "start from pretrained weights: FILE of torch.save(model.state_dict()) (or nanoGPT's ckpt.pt, {\"model\": ...}, "
     "torch.compile's _orig_mod. prefix removed), a .safetensors file, or the hub's shards (a folder, or its "
     "model.safetensors.index.json), by the model's state_dict names and shapes, checked strictly (a fine-tune's "
     "adapters, missing from it, keep the model file's values); every rank reads its own copy, only the tensors it "
     "holds, and the ranks compare its structure and frozen weights; --resume goes on from the checkpoint's weights "
     "instead, and then only the frozen weights it gives must be the checkpoint's (any --init-from, or none, that gives "
     "them is accepted)",
     &TrainConfig::initFrom, A::HostLocal, nullptr, nullptr},
    {"dry-run", "Run", "check config, data, model, devices and world size on every rank, print the plan, train nothing",
     &TrainConfig::dryRun, A::Compared, nullptr, nullptr},
    {"probe", "Run",
     "time a few steps on every worker, the links to rank 0 and the codecs; predict samples/s for 1..N workers per "
     "mode and codec, recommend one, write probe.json in the train dir; train nothing",
     &TrainConfig::probe, A::Compared, nullptr, [](const TrainConfig& c) {
       require(!(c.probe && c.dryRun), "--probe and --dry-run: choose one (the probe checks the same things, then times them)"); }},
};
// clang-format on

const char* const kGroups[] = {"Model and data", "Optimization", "Modes", "Compression", "Run"};

std::string canonical(const TrainConfig& cfg, const Member& member) {
  return std::visit(
      [&](auto field) -> std::string {
        const auto& value = cfg.*field;
        using T = std::decay_t<decltype(value)>;
        if constexpr (std::is_same_v<T, std::string>) return value;
        else if constexpr (std::is_same_v<T, bool>) return value ? "true" : "false";
        else if constexpr (std::is_same_v<T, double>) return canonicalNumber(value);
        else if constexpr (std::is_same_v<T, Mode> || std::is_same_v<T, Switch> || std::is_same_v<T, OnOff> ||
                           std::is_same_v<T, MemoryUse>) {
          return nameOf(value);
        }
        else return std::to_string(value);
      },
      member);
}

// The cxxopts value of a row, with the default TrainConfig's value as its default.
std::shared_ptr<cxxopts::Value> optionValue(const Member& member) {
  static const TrainConfig defaults;
  const std::string text = canonical(defaults, member);
  return std::visit(
      [&](auto field) -> std::shared_ptr<cxxopts::Value> {
        using T = std::decay_t<decltype(defaults.*field)>;
        if constexpr (std::is_same_v<T, Mode> || std::is_same_v<T, Switch> || std::is_same_v<T, OnOff> ||
                           std::is_same_v<T, MemoryUse>) {
          return cxxopts::value<std::string>()->default_value(text);
        }
        else return cxxopts::value<T>()->default_value(text);
      },
      member);
}

void readBack(const cxxopts::ParseResult& r, const Flag& flag, TrainConfig& cfg) {
  std::visit(
      [&](auto field) {
        using T = std::decay_t<decltype(cfg.*field)>;
        if constexpr (std::is_same_v<T, Mode>) cfg.*field = parseMode(r[flag.name].as<std::string>());
        else if constexpr (std::is_same_v<T, Switch>) cfg.*field = parseSwitch(flag.name, r[flag.name].as<std::string>());
        else if constexpr (std::is_same_v<T, OnOff>) cfg.*field = parseOnOff(flag.name, r[flag.name].as<std::string>());
        else if constexpr (std::is_same_v<T, MemoryUse>) {
          cfg.*field = parseMemoryUse(flag.name, r[flag.name].as<std::string>());
        }
        else cfg.*field = r[flag.name].as<T>();
      },
      flag.member);
}

cxxopts::Options makeOptions() {
  cxxopts::Options options(
      "pstrain",
      "Data-parallel training with a parameter server. Launch with Open MPI:\n"
      "  mpirun -np 3 pstrain --model lenet --epochs 2      (rank 0 server + 2 workers)\n"
      "  mpirun --hostfile hostfiles/localhost -np 3 pstrain ...\n"
      "Rank 0 keeps the weights and applies the averaged gradients; ranks 1..N train on disjoint\n"
      "shards of the data. Checkpoints go to TRAIN_DIR/ckpt for pseval.\n");
  options.set_width(100);
  for (const char* group : kGroups) {
    auto add = options.add_options(group);
    for (const Flag& flag : kFlags) {
      if (std::string(flag.group) != group) continue;
      auto value = optionValue(flag.member);
      if (flag.implicitValue) value->implicit_value(flag.implicitValue);
      add(flag.name, flag.help, value);
    }
  }
  options.add_options("Model and data")("list-models", "print the models and exit")("list-datasets",
                                                                                    "print the datasets and exit");
  options.add_options("Modes")("list-modes", "print the modes and exit");
  options.add_options("Run")("config", "read flags from FILE (key = value lines); command-line flags override it",
                             cxxopts::value<std::string>()->default_value(""))("version", "print versions and exit")(
      "doctor", "under mpirun, check every host before a run (the same build and libtorch, identical data and "
                "model files, a writable train dir with room, clocks, MPI's reach, devices, BLAS): one line per "
                "problem, exit 0 when all is well and 2 when not; trains nothing")(
      "h,help", "print this help");
  return options;
}

// The flag whose value is `value` in `args` ("--flag value" or "--flag=value"), for errors
// that name the value only; empty if none.
std::string flagOfValue(const std::vector<std::string>& args, const std::string& value) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const auto eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos && arg.substr(eq + 1) == value) return arg.substr(0, eq);
    if (arg == value && i > 0 && args[i - 1].rfind("--", 0) == 0) return args[i - 1];
  }
  return "";
}

// cxxopts gives a flag that may stand alone (--balance) its value only as --balance=off, and
// reads "--balance off" as the bare flag and a stray "off". pstrain takes no positional
// arguments, so a word after such a flag is its value: joined here.
std::vector<std::string> withValuesJoined(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    out.push_back(args[i]);
    const bool standsAlone = std::any_of(std::begin(kFlags), std::end(kFlags), [&](const Flag& f) {
      return f.implicitValue && args[i] == "--" + std::string(f.name);
    });
    if (standsAlone && i + 1 < args.size() && !args[i + 1].empty() && args[i + 1][0] != '-') out.back() += "=" + args[++i];
  }
  return out;
}

cxxopts::ParseResult parse(cxxopts::Options& options, const std::vector<std::string>& args) {
  std::vector<std::string> copy = {"pstrain"};
  for (const std::string& arg : withValuesJoined(args)) copy.push_back(arg);
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  try {
    auto result = options.parse(static_cast<int>(argv.size()), argv.data());
    if (!result.unmatched().empty()) throw ConfigError(fmt::format("unexpected argument '{}'", result.unmatched().front()));
    return result;
  } catch (const cxxopts::exceptions::incorrect_argument_type& e) {
    // cxxopts names the value ("Argument 'inf' failed to parse"): name the flag too.
    const std::string what = e.what();
    const auto open = what.find("\u2018"), close = what.find("\u2019");
    const std::string value = open != std::string::npos && close != std::string::npos
                                  ? what.substr(open + 3, close - open - 3) : "";
    const std::string flag = flagOfValue(args, value);
    if (flag.empty()) throw ConfigError(what);
    const bool boolean = std::any_of(std::begin(kFlags), std::end(kFlags), [&](const Flag& f) {
      return "--" + std::string(f.name) == flag && std::holds_alternative<bool TrainConfig::*>(f.member);
    });
    throw ConfigError(boolean ? fmt::format("{} {}: true or false", flag, value)
                              : fmt::format("{} {}: not a number in range (a finite number is needed)", flag, value));
  } catch (const cxxopts::exceptions::exception& e) {
    throw ConfigError(e.what());
  }
}


// "--lr given 2 times: the last counts" for each flag that `args` gives more than once.
std::vector<std::string> repeatedFlags(const std::vector<std::string>& args) {
  std::map<std::string, int> count;
  for (const std::string& arg : args) {
    if (arg.rfind("--", 0) == 0 && arg.size() > 2) ++count[arg.substr(0, arg.find('='))];
  }
  std::vector<std::string> repeated;
  for (const auto& [flag, times] : count) {
    if (times > 1) repeated.push_back(fmt::format("{} given {} times: the last one counts", flag, times));
  }
  return repeated;
}

}  // namespace

std::vector<std::string> configFileArguments(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("{}: cannot read the config file", path));
  std::vector<std::string> args;
  std::map<std::string, int> lineOfKey;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find('\0') != std::string::npos) {
      throw ConfigError(fmt::format("{}:{}: a NUL byte: not a text file of 'key = value' lines", path, number));
    }
    // A comment starts with '#' at the line's start or after a blank: "run#1" is a value.
    for (std::size_t hash = line.find('#'); hash != std::string::npos; hash = line.find('#', hash + 1)) {
      if (hash == 0 || std::isspace(static_cast<unsigned char>(line[hash - 1]))) {
        line.erase(hash);
        break;
      }
    }
    line = trim(line);
    if (line.empty()) continue;
    const auto eq = line.find('=');
    const std::string key = trim(line.substr(0, eq));
    if (eq == std::string::npos || key.empty() || key.rfind("-", 0) == 0) {
      throw ConfigError(fmt::format("{}:{}: expected 'key = value' (keys are flag names without --), got '{}'",
                                    path, number, line));
    }
    if (key == "config") throw ConfigError(fmt::format("{}:{}: a config file cannot name another", path, number));
    const auto [earlier, first] = lineOfKey.emplace(key, number);
    if (!first) {
      throw ConfigError(fmt::format("{}:{}: '{}' again (line {} sets it too): keep one", path, number, key,
                                    earlier->second));
    }
    args.push_back("--" + key + "=" + trim(line.substr(eq + 1)));
  }
  return args;
}

TrainFlags parseTrainFlags(const std::vector<std::string>& args) {
  cxxopts::Options options = makeOptions();
  // Flags from --config FILE come first so that the command line overrides them.
  std::vector<std::string> all = args;
  const std::string configPath = parse(options, args)["config"].as<std::string>();
  if (!configPath.empty()) {
    const auto fromFile = configFileArguments(configPath);
    try {
      parse(options, fromFile);
    } catch (const ConfigError& e) {
      throw ConfigError(configPath + ": " + e.what());
    }
    all.insert(all.begin(), fromFile.begin(), fromFile.end());
  }
  const cxxopts::ParseResult r = parse(options, all);
  TrainFlags flags;
  flags.warnings = repeatedFlags(args);
  if (r.count("help")) {
    flags.helpText = options.help();
    return flags;
  }
  flags.version = r.count("version") > 0;
  flags.listModels = r.count("list-models") > 0;
  flags.listDatasets = r.count("list-datasets") > 0;
  flags.listModes = r.count("list-modes") > 0;
  flags.doctor = r.count("doctor") > 0;
  try {
    for (const Flag& flag : kFlags) readBack(r, flag, flags.cfg);
  } catch (const cxxopts::exceptions::exception& e) {
    throw ConfigError(e.what());
  }
  flags.cfg.validate();
  return flags;
}

void TrainConfig::validate() const {
  for (const Flag& flag : kFlags) {
    if (flag.check) flag.check(*this);
  }
}

std::vector<std::pair<std::string, std::string>> fingerprintFields(const TrainConfig& cfg) {
  std::vector<std::pair<std::string, std::string>> fields;
  for (const Flag& flag : kFlags) {
    if (flag.agreement != Agreement::Fingerprint) continue;
    const std::string value = canonical(cfg, flag.member);
    const auto reading = flag.reading ? flag.reading(cfg, value) : std::optional<std::string>(value);
    if (reading) fields.emplace_back(flag.name, *reading);
  }
  return fields;
}

std::vector<std::string> commandLineOf(const TrainConfig& cfg) {
  std::vector<std::string> args;
  for (const Flag& flag : kFlags) args.push_back(fmt::format("--{}={}", flag.name, canonical(cfg, flag.member)));
  return args;
}

std::vector<std::pair<std::string, std::string>> agreedFields(const RunPlan& run) {
  const TrainConfig cfg = run.explicitFlags();
  auto fields = fingerprintFields(cfg);
  for (const Flag& flag : kFlags) {
    if (flag.agreement == Agreement::Compared) fields.emplace_back(flag.name, canonical(cfg, flag.member));
  }
  return fields;
}

std::vector<std::pair<std::string, std::string>> allFields(const RunPlan& run) {
  const TrainConfig cfg = run.explicitFlags();
  auto fields = fingerprintFields(cfg);
  for (const Flag& flag : kFlags) {
    if (flag.agreement != Agreement::Fingerprint) fields.emplace_back(flag.name, canonical(cfg, flag.member));
  }
  return fields;
}

}  // namespace pstrain::config
