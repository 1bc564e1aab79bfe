#pragma once
// What one optimizer update cost and carried, as the roles measure it and the Publisher
// logs it (metrics.jsonl). Torch-free.

namespace pstrain::roles {

// The accounting of one optimizer update.
struct StepStats {
  double lossSum = 0;          // summed over the samples of the update
  double samples = 0;
  double computeSeconds = 0;   // data wait + forward + backward, mean over the batches of the update
  double slowestComputeSeconds = 0;  // the same, of the slowest batch: the rest of a sync exchange is communication
  double dataWaitSeconds = 0;  // mean over the batches, waiting for the batch
  // Rank 0: sending and waiting for the messages of the update. In sync mode the whole
  // period from one step's weights out to the next's (the workers' batches, the messages,
  // what the server overlaps with them) less an update that runs alone.
  double exchangeSeconds = 0;
  double updateSeconds = 0;    // rank 0: averaging and the optimizer step
  double codecSeconds = 0;     // rank 0 encoding and decoding, plus the workers' mean
  double exchangeCpuSeconds = 0;  // rank 0's CPU time (all threads) during exchangeSeconds, less the update's
  // Bytes of one message each way (server -> one worker, one worker -> server; in the peer
  // modes one rank's share), as sent and before encoding.
  double bytesDown = 0, rawBytesDown = 0, bytesUp = 0, rawBytesUp = 0;
  double gradNorm = 0;         // L2 norm of the averaged gradient, before --clip-grad-norm
  bool applied = true;         // false: a non-finite update that --skip-nonfinite dropped
};

}  // namespace pstrain::roles
