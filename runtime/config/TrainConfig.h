#pragma once
// The training configuration shared by every rank. Parsed by the launcher, validated here,
// compared across ranks at start-up (roles/Handshake) and recorded in run.json and every
// checkpoint (as its fingerprint).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace pstrain::config {

// Bounds of the numbers a run takes (checked by validate(), so that no product or cast of
// them overflows): steps and step counts, and seconds of any wait or limit (30 days).
constexpr std::int64_t kMaxSteps = std::int64_t(1) << 40;
constexpr double kMaxSeconds = 30 * 86400.0;

struct TrainConfig {
  std::string mode = "sync";           // sync | backup | async | allreduce | gossip
  std::string model = "lenet";         // a zoo name or a TorchScript file (isModelFile)
  std::string dataset = "fashion-mnist";  // a built-in name or an .npz file (isDatasetFile)
  std::string dataDir;                 // empty: the dataset's default location
  std::int64_t syntheticSize = 6000;   // training samples of the synthetic dataset
  std::int64_t batchSize = 64;         // per worker (per virtual shard)
  // A step's global batch is dealt to this many virtual shards of batchSize samples, whoever
  // computes them (data/ShardSampler.h): the run's results do not depend on how many
  // workers there are. 0: as many as the first launch has workers; --resume keeps the
  // checkpoint's. The peer and point-to-point modes but allreduce keep one per worker.
  int virtualShards = 0;
  bool reshard = false;                // --resume may change the virtual shards or the batch size
  bool balance = false;                // sync: deal the virtual shards by measured speed (roles/Balance.h)
  double lr = 0.01;                    // base learning rate (one worker)
  std::string lrScaling = "linear";    // none | linear (lr x workers)
  std::int64_t warmupSteps = 0;        // linear ramp to the scaled lr
  std::string lrDecay = "none";        // none | cosine (to 0 at the last step)
  std::string loss = "auto";           // auto | cross-entropy | nll | mse (see lossFunction)
  double momentum = 0.9;
  bool nesterov = false;
  double weightDecay = 0.0;
  std::int64_t steps = 0;              // total optimizer steps; 0: derive from epochs
  std::int64_t epochs = 1;
  std::string trainDir = "runs/pstrain";
  bool overwrite = false;              // replace an earlier run in trainDir
  bool dryRun = false;                 // check everything on every rank, print the plan, stop
  bool probe = false;                  // time steps, links and codecs; predict; write probe.json; train nothing
  bool resume = false;                 // continue from the newest valid checkpoint in trainDir
  bool skipNonfinite = false;          // drop (and count) a step with a non-finite loss/gradient
  std::string injectNan;               // testing: "RANK:STEP" makes that worker's loss NaN
  std::int64_t checkpointEvery = 500;  // steps; the final step is always checkpointed
  std::int64_t logEvery = 50;          // steps
  std::uint64_t seed = 1;
  int threads = 0;                     // intra-op threads per rank; 0: cores / local ranks
  std::string device = "auto";         // auto | cpu | mps | cuda
  double timeoutSeconds = 300;         // longest wait in any collective before giving up
  double maxSeconds = 0;               // stop training after this long (0: no limit)
  std::string doorbell = "on";         // UDP wake-ups between ranks (host-local; comm/Doorbell.h)
  std::string overlap = "on";          // sync: reduce gradient buckets while backward runs
  std::int64_t bucketKb = 256;         // overlap: gradient bucket size

  // Modes (DESIGN.md, "Other modes").
  int aggregate = 0;                   // backup: gradients applied per step; 0: workers - 1 (at least 1)
  std::int64_t maxStaleness = 4;       // async: oldest accepted gradient, in updates behind
  double fetchProbability = 0.5;       // gossip: chance of averaging with a peer after a batch
  std::string interpolation = "clock"; // gossip: constant:V | clock | loss
  double divergenceThreshold = 0;      // gossip: below this loss, damp the averaging (0: off)
  double peerTimeoutMs = 100;          // gossip: a slower read makes the peer less likely
  std::string straggle;                // testing: "RANK:MS" makes that rank sleep MS ms per batch
  double simulateComputeMs = 0;        // benchmarks: workers sleep this long per batch instead of computing

  // Compression (runtime/codec).
  std::string compress = "none";       // gradients: none | zlib[:L] | fp16 | bf16 | int8 | topk:R | randomk:R | powersgd:R
  std::string compressWeights = "none";// weights: none | zlib[:L] | fp16 | bf16 | int8
  std::string errorFeedback = "auto";  // auto (on for topk, randomk, powersgd) | on | off

  // Throws ConfigError naming the flag when a value is out of range. (Model and dataset
  // names are checked against their registries by the launcher.)
  void validate() const;

  // --inject-nan parsed: worker `rank`'s loss turns NaN at `step`; rank 0 when not set.
  // Throws ConfigError when the text is not "RANK:STEP" with RANK >= 1 and STEP >= 0.
  struct NanInjection {
    int rank = 0;
    std::int64_t step = -1;
  };
  NanInjection nanInjection() const;

  // --straggle parsed: `rank` sleeps `milliseconds` per batch; rank -1 when not set.
  struct Straggler {
    int rank = -1;
    double milliseconds = 0;
  };
  Straggler straggler() const;

  // --interpolation parsed: how far a gossip rank moves toward the peer it read.
  struct Interpolation {
    enum Kind { Constant, Clock, Loss } kind = Clock;
    double value = 0.5;  // f for Constant
  };
  Interpolation gossipInterpolation() const;

  // Whether the sync exchange overlaps backward: --overlap on, sync mode, raw messages, and
  // not --skip-nonfinite (which must see the whole gradient before any of it is applied).
  // A function of shared fields only, so every rank decides the same.
  bool overlapping() const;

  // The loss, --loss auto resolved: nll for the zoo's models (their outputs are
  // log-probabilities), cross-entropy on the outputs (logits) of a model file.
  std::string lossFunction() const;

  // Ranks that compute gradients in a world of `worldSize`: all of them in the peer modes
  // (allreduce, gossip), all but the server otherwise.
  int computeRanks(int worldSize) const;
  // Worker batches behind one optimizer update, given `workers` computing ranks: what
  // --lr-scaling linear multiplies the lr by (sync, allreduce: workers; backup: K;
  // async, gossip: 1, every update is one batch).
  int batchesPerUpdate(int workers) const;
  // Optimizer updates in one epoch when each worker's shard is `batchesPerEpoch` batches:
  // in async every update takes one worker's batch, so an epoch is workers times as many.
  std::int64_t updatesPerEpoch(std::int64_t batchesPerEpoch, int workers) const;

  // The fields every rank must agree on, in a fixed order, as (flag name, canonical value).
  // Host-local choices (data dir, threads, device, train dir, logging) are left out.
  std::vector<std::pair<std::string, std::string>> sharedFields() const;

  // 16 hex digits identifying sharedFields(): equal fingerprints mean the same training.
  std::string fingerprint() const;
};

// Whether --model names a TorchScript file (it holds a '/' or ends in .pt or .pth) rather
// than a zoo model, and whether --dataset names an .npz file (a '/' or .npz) rather than a
// built-in dataset. The one place of both rules.
bool isModelFile(const std::string& model);
bool isDatasetFile(const std::string& dataset);

// The optimizer step count of a run: `steps` when set, else epochs x stepsPerEpoch; throws
// ConfigError when that is more than kMaxSteps.
std::int64_t totalSteps(const TrainConfig& cfg, std::int64_t stepsPerEpoch);

// "1.5" for 1.5, "0.01" for 0.01: shortest text that reads back as the same double.
std::string canonicalNumber(double value);

}  // namespace pstrain::config
