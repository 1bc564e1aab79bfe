#pragma once
// The training configuration as the user gave it, shared by every rank. Its fields are set
// from pstrain's flags (Flags.h: one row per flag with its help, check and whether ranks
// must agree on it) and never changed after; what start-up resolves from them is a
// RunPlan's (config/RunPlan.h), which the roles read. Compared across ranks at start-up
// (protocol/Handshake) and recorded in run.json and every checkpoint (as its fingerprint).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/config/Codecs.h"
#include "runtime/config/Mode.h"
#include "runtime/config/Switch.h"

namespace pstrain::config {

// Bounds of the numbers a run takes (checked by the flags, so that no product or cast of
// them overflows): steps and step counts, and seconds of any wait or limit (30 days).
constexpr std::int64_t kMaxSteps = std::int64_t(1) << 40;
constexpr double kMaxSeconds = 30 * 86400.0;

// The defaults are the flags' (pstrain --help shows them); Flags.cpp says what each means.
struct TrainConfig {
  Mode mode = Mode::Sync;
  std::string model = "lenet";            // a zoo name or a TorchScript file (isModelFile)
  std::string initFrom;                   // pretrained weights: a state dict or .safetensors file ("": none)
  std::string dataset = "fashion-mnist";  // a built-in name, or a file or folder (data/Formats.h)
  std::string dataDir;                    // empty: the dataset's folder in data::dataRoot()
  std::int64_t syntheticSize = 6000;
  std::int64_t batchSize = 64;            // per micro-batch of a worker (of a virtual shard)
  int gradAccum = 1;                      // micro-batches of batchSize per virtual shard per step
  std::string precision = "fp32";         // a row of config::precisions(): the workers' forward pass
  std::string lossScale = "auto";         // auto | dynamic | none: see lossScaling()
  std::int64_t lossScaleWindow = 2000;    // finite updates in a row before the loss scale doubles
  // A step's global batch is dealt to this many virtual shards of batchSize samples, whoever
  // computes them (data/ShardSampler.h). 0: as many as the first launch has workers;
  // --resume keeps the checkpoint's (RunPlan::resolvedShards). Modes that are not sharded
  // keep one per worker.
  int virtualShards = 0;
  bool reshard = false;
  Switch balanceFlag = Switch::Auto;     // see balance()
  double lr = 0.01;
  std::string lrScaling = "linear";
  std::int64_t warmupSteps = 0;
  std::string lrDecay = "none";
  std::string loss = "auto";              // a row of config::losses(), or auto (RunPlan::lossFunction())
  std::int64_t ignoreIndex = -100;        // a target of this value adds no loss (padding)
  std::int64_t blockSize = 0;             // a token file's window (context) length; 0: not a token file
  std::string optimizer = "sgd";          // sgd | adam | adamw (runtime/optim)
  double momentum = 0.9;                  // sgd
  bool nesterov = false;                  // sgd
  double weightDecay = 0.0;               // an L2 term for sgd and adam; decoupled for adamw
  std::string weightDecayScope = "all";   // a row of config/Optimizers.h's decayScopes(): the tensors it falls on
  std::string betas = "0.9,0.999";        // adam, adamw: "B1,B2" (adamBetas())
  double eps = 1e-8;                      // adam, adamw
  double clipGradNorm = 0;                // the averaged gradient's L2 norm at most this (0: off)
  std::int64_t steps = 0;                 // 0: from epochs
  std::int64_t epochs = 1;
  std::string trainDir = "runs/pstrain";
  bool overwrite = false;
  bool dryRun = false;
  bool probe = false;
  bool resume = false;
  bool skipNonfinite = false;
  bool trustModel = false;                // a model file may call file or network operators
  std::string injectNan;                  // testing: "RANK:STEP"
  std::string injectOverflow;             // testing: "RANK:STEP"
  std::int64_t checkpointEvery = 500;
  std::int64_t logEvery = 50;
  std::uint64_t seed = 1;
  int threads = 0;
  int serverThreads = 0;                  // rank 0's when it does not compute (0: as threads)
  std::string device = "auto";
  double timeoutSeconds = 300;
  double maxSeconds = 0;
  OnOff doorbell = OnOff::On;
  OnOff tensorboard = OnOff::On;          // rank 0's event file in the train dir
  double stallWarningSeconds = 60;        // a wait this long names who has not arrived (0: never)
  OnOff overlap = OnOff::On;
  std::int64_t bucketKb = 256;
  MemoryUse memory = MemoryUse::Auto;  // --memory (RunPlan::memoryChosen: auto's choice)
  // Parameter servers (ranks 0..servers-1, each owning a range of the weights: sync's
  // range servers' exchange, exchanges/range_servers); the other ranks are workers.
  int servers = 1;
  bool stackServers = false;              // allow two servers on a host while another host has none

  // The modes' own (Mode.h).
  int aggregate = 0;                      // backup: gradients per step; 0: workers - 1
  std::int64_t maxStaleness = 4;          // async
  double fetchProbability = 0.5;          // gossip
  std::string interpolation = "clock";    // gossip: constant:V | clock | loss
  double divergenceThreshold = 0;         // gossip
  double peerTimeoutMs = 100;             // gossip
  std::string straggle;                   // testing: "RANK:MS[,RANK:MS...]"
  std::int64_t stopAt = 0;                // testing: stop after this step as a stop request does (0: never)
  std::string localStepsFlag = kAuto;     // diloco: inner steps per round (H), or auto (exchanges/rounds)
  double outerLr = 0.7;                   // diloco
  double outerMomentum = 0.6;             // diloco
  std::string outerOptimizer = "nesterov";  // diloco: a row of outerOptimizers()
  Switch overlapRoundsFlag = Switch::Auto;  // diloco, localsgd (exchanges/rounds)
  std::string fragmentsFlag = kAuto;      // diloco, localsgd: streamed rounds' fragments, or auto (exchanges/rounds)
  double simulateComputeMs = 0;           // benchmarks

  // Compression (runtime/codec): codec specs, or auto (see gradientCodec()).
  std::string compress = kAuto;
  std::string compressWeights = kAuto;
  Switch errorFeedback = Switch::Auto;  // see errorFeedbackOn()

  // Throws ConfigError naming the flag when a value is out of range or flags contradict
  // each other (every flag's check, Flags.cpp). Model, dataset and codec names are checked
  // against their registries by the launcher.
  void validate() const;

  const ModeInfo& modeInfo() const { return info(mode); }
  // The samples a virtual shard computes per step, --batch-size x --grad-accum: what its
  // sampler deals, what the server counts and the lr scaling rule refers to. A run with
  // --grad-accum K takes the same windows in the same order as one with K times the batch.
  std::int64_t shardBatch() const { return batchSize * gradAccum; }
  // shardBatch() for the start-up lines: "32", or "32 (4 micro-batches of 8)".
  std::string describeBatch() const;
  // --compress and --compress-weights as they apply, auto resolved: in diloco kFrugalCodec
  // both ways (the pseudo-gradient up; the update toward the new weights down) unless
  // --compress none (raw floats both ways, as diloco's rounds were), elsewhere raw floats.
  std::string gradientCodec() const;
  std::string weightCodec() const;
  // Whether they code the messages (a codec other than raw floats).
  bool compressesGradients() const { return gradientCodec() != kRawCodec; }
  bool compressesWeights() const { return weightCodec() != kRawCodec; }
  // Whether --balance deals work by speed: on, or auto in diloco (workers of unequal speed
  // then do local steps in proportion to it instead of waiting for the slowest).
  bool balance() const {
    return balanceFlag == Switch::On || (balanceFlag == Switch::Auto && modeInfo().runsLocalRounds());
  }
  // --local-steps as a number; 0 for auto (measured in the first rounds:
  // exchanges/rounds/RoundsPlan.h).
  std::int64_t fixedLocalSteps() const;
  // --fragments P, or 0 for auto; throws ConfigError on anything else.
  int fixedFragments() const;

  // Whether the workers scale the loss and rank 0 skips overflowed updates
  // (optim/LossScale.h): --loss-scale dynamic, or auto with --precision fp16.
  bool lossScaling() const;

  // --inject-nan (worker `rank`'s loss turns NaN at `step`) and --inject-overflow (its
  // gradient turns +inf) parsed; rank 0 when not set. Throw ConfigError when the text is not
  // "RANK:STEP" with RANK >= 1 and STEP >= 0.
  struct Injection {
    int rank = 0;
    std::int64_t step = -1;
  };
  Injection nanInjection() const;
  Injection overflowInjection() const;

  // --straggle parsed ("RANK:MS[,RANK:MS...]"): the milliseconds `rank` sleeps per batch,
  // 0 for a rank it does not name. Throws ConfigError on a malformed list.
  double straggleMilliseconds(int rank) const;

  // "N train samples", or a token stream's "T train tokens (windows of L)", for a training
  // set of `samples` (a token stream's: its window offsets, T - L).
  std::string describeTrainSet(std::int64_t samples) const;

  // --betas parsed: Adam's (beta1, beta2), each in [0, 1); throws ConfigError otherwise.
  std::pair<double, double> adamBetas() const;

  // --interpolation parsed: how far a gossip rank moves toward the peer it read.
  struct Interpolation {
    enum Kind { Constant, Clock, Loss } kind = Clock;
    double value = 0.5;  // f for Constant
  };
  Interpolation gossipInterpolation() const;

  // The rule and schedule of the updates rank 0 applies (roles/UpdateState): this config in
  // every mode but diloco; there the outer step: SGD with --outer-momentum (Nesterov under
  // --outer-optimizer nesterov) at the constant --outer-lr, with neither clipping nor weight
  // decay (both belong to the workers' inner steps).
  TrainConfig updateRule() const;
  // What an optimizer state of this run belongs to: the role of its rule ("update": the
  // gradients' update; "outer": diloco's outer step) and its optimizer ("update adamw").
  std::string updateRuleName() const;

  // Whether a worker's gradient leaves it bucket by bucket as backward makes it (sync, with
  // one server or K): --overlap on and raw gradients. The worker then holds the buckets in
  // flight, never a whole gradient; where updates cannot start on arrival (clipping, loss
  // scaling, --skip-nonfinite), the server sums the buckets and updates once all are in.
  // These predicates read shared fields only, so every rank decides the same.
  bool streamsGradients() const;
  // --precision bf16-weights: the workers hold the weights in bfloat16, the servers float32.
  bool bf16Weights() const;
  // Whether sync's server updates each bucket (K servers: each part of its range) as soon as
  // every worker's is in, holding no sum of the whole gradient: streamsGradients(), raw
  // weights, and neither --skip-nonfinite, --clip-grad-norm nor loss scaling (which must see
  // the whole gradient before any of it is applied).
  bool updatesOnArrival() const;

  // --lr-scaling linear (the lr times the batches an update averages); --lr-decay cosine.
  bool linearLrScaling() const;
  bool cosineLrDecay() const;

  // Worker batches behind one optimizer update, given `workers` computing ranks (or virtual
  // shards): what --lr-scaling linear multiplies the lr by (Mode.h, Quorum).
  int batchesPerUpdate(int workers) const;
  // Optimizer updates in one epoch when each worker's shard is `batchesPerEpoch` batches.
  std::int64_t updatesPerEpoch(std::int64_t batchesPerEpoch, int workers) const;
};

// Whether --model names a TorchScript file (it holds a '/' or ends in .pt or .pth) rather
// than a zoo model; whether --dataset names a token file, by its extension (nanoGPT's and
// llm.c's .bin, NumPy's .npy of ids: data/TokenFile.cpp gives each its layout), which takes
// --block-size. The one place of these rules (data/Formats.h's token row reads it).
constexpr const char* kTokenFileExtensions[] = {".bin", ".npy"};
bool isModelFile(const std::string& model);
bool isTokenFile(const std::string& dataset);

// The optimizer step count of a run: `steps` when set, else epochs x stepsPerEpoch; throws
// ConfigError when that is more than kMaxSteps.
std::int64_t totalSteps(const TrainConfig& cfg, std::int64_t stepsPerEpoch);

// "1.5" for 1.5, "0.01" for 0.01: shortest text that reads back as the same double.
std::string canonicalNumber(double value);

}  // namespace pstrain::config
