#pragma once
// Human-readable progress text for rank 0 and the evaluator.
#include <cstdint>
#include <string>

namespace pstrain::metrics {

// "1:02:03" or "2:03" for a duration in seconds; "?" when unknown (negative or not finite).
std::string formatDuration(double seconds);

struct StepProgress {
  std::int64_t step = 0;   // steps completed
  std::int64_t total = 0;  // steps in the run
  std::int64_t epoch = 0;
  double loss = 0;
  double lr = 0;
  double samplesPerSecond = 0;
  std::int64_t tokensPerSample = 0;  // a token stream's window (--block-size): tokens/s instead
  std::int64_t firstStep = 0;  // the step this process started at (after a resume: not 0)
  double elapsedSeconds = 0;   // since the first step of this process
};

// "step   120/938 (12.8%) | epoch 0 | loss 0.5432 | lr 0.0200 | 3456 samples/s | ETA 0:34"
// (a token stream's: "... | 7400 tokens/s | ...")
std::string progressLine(const StepProgress& p);

}  // namespace pstrain::metrics
