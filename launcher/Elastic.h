#pragma once
// pstrain-run, the elastic supervisor (README: "The night on laptops"): it runs mpirun
// with pstrain, relaunches from the newest checkpoint on the hosts that still answer when
// the job fails, and takes hosts back when they return (a SIGUSR1 makes pstrain checkpoint
// and stop at its next step; exit kResumableExit). It never links MPI or libtorch: it
// starts processes and reads files. Every event is a line of <train-dir>/elastic.jsonl
// and of its output.
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace pstrain::launcher {

struct Host {
  std::string name;
  int slots = 1;
};

// A discovery script's output, Horovod's convention: one "host:slots" (or "host") per
// line; blank lines and '#' comments skipped. Throws ConfigError naming the line.
std::vector<Host> parseHostList(const std::string& text);
// An Open MPI hostfile: "host [slots=N] [...]" per line, '#' comments.
std::vector<Host> parseHostfile(const std::string& text);
// "host1:2 host2:1", as events name them.
std::string describeHosts(const std::vector<Host>& hosts);

// The newest step with a published checkpoint in `trainDir`/ckpt (its .ok marker), or 0.
std::int64_t newestCheckpointStep(const std::string& trainDir);

// A command run to completion: its exit code (128 + N after signal N; -1 if it could not
// start), its standard output when captured (the first MiB), and whether it was killed,
// with whatever it started, because `timeout` passed or `cancelled` (asked every 200 ms)
// said so.
struct CommandResult {
  int exitCode = -1;
  std::string output;
  bool timedOut = false;
};
CommandResult runCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout, bool captureOutput,
                         const std::function<bool()>& cancelled = {});

struct ElasticOptions {
  std::string hostfile;         // hosts probed with a short launch each, or
  std::string discoveryScript;  // hosts as the script prints them
  int maxRanks = 0;             // --np: the most ranks to start (0: every slot offered)
  int minWorkers = 1;
  int maxRestarts = 10;
  double discoveryIntervalSeconds = 5;  // asking for hosts while the job runs
  double waitForHostsSeconds = 600;     // for at least --min-workers, before giving up
  double probeTimeoutSeconds = 15;      // one probe launch of a hostfile's host
  double stopGraceSeconds = 30;         // SIGUSR1 to SIGTERM, and SIGTERM to SIGKILL, on a stop
  std::string mpirun = "mpirun";
  std::vector<std::string> mpirunArgs;
  std::string pstrain;                  // the binary (default: next to pstrain-run)
  std::vector<std::string> pstrainArgs;
  std::string helpText;
};

// Throws ConfigError on bad flags.
ElasticOptions parseElasticCommand(int argc, char** argv);

// Runs the job to its end; returns the job's exit status (0 done, 2 a configuration
// error, 3 stopped with a checkpoint on SIGINT/SIGTERM, else the last failure's once it
// gave up, or 128 + the signal when a stop found no job or the job did not checkpoint).
int superviseElastic(const ElasticOptions& options);

}  // namespace pstrain::launcher
