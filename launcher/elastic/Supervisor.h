#pragma once
// pstrain-run, the elastic supervisor (README: "The night on laptops"): it runs mpirun
// with pstrain, relaunches from the newest checkpoint on the hosts that still answer when
// the job fails, and takes hosts back when they return (a SIGUSR1 makes pstrain checkpoint
// and stop at its next step; exit kResumableExit). It never links MPI or libtorch: it
// starts processes and reads files. Every event is a line of <train-dir>/elastic.jsonl
// and of its output.
#include <cstdint>
#include <string>

#include "launcher/elastic/Options.h"

namespace pstrain::launcher {

// The newest step with a published checkpoint in `trainDir`/ckpt (its .ok marker), or 0.
std::int64_t newestCheckpointStep(const std::string& trainDir);

// Runs the job to its end; returns the job's exit status (0 done, 2 a configuration
// error, 3 stopped with a checkpoint on SIGINT/SIGTERM, else the last failure's once it
// gave up, or 128 + the signal when a stop found no job or the job did not checkpoint).
int superviseElastic(const ElasticOptions& options);

}  // namespace pstrain::launcher
