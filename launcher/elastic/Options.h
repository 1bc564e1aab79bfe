#pragma once
// pstrain-run's command line: its own flags, and pstrain's after "--".
#include <string>
#include <vector>

namespace pstrain::launcher {

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
  bool preferFastestLink = false;       // probe the hosts' subnets first, and give MPI the fastest
  std::string pstrain;                  // the binary (default: next to pstrain-run)
  std::vector<std::string> pstrainArgs;
  std::string helpText;
};

// Throws ConfigError on bad flags.
ElasticOptions parseElasticCommand(int argc, char** argv);

}  // namespace pstrain::launcher
