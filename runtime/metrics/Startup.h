#pragma once
// Where a rank's start-up time goes, from its launcher's start to the first training step
// (run.json "startup"): named phases in order, each lasting from the end of the one before.
//   launch   the launcher's start (the parent process: mpirun, or its daemon on another
//            host) to this process's; under mpirun only
//   load     process start to main(): loading libtorch and MPI, static initialisers
//            (Linux and macOS: where the system tells a process's start time, Portable.h)
// then the phases main() and the roles mark: mpi_init, command_line, model, data,
// handshake, first_step.
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace pstrain::metrics {

class Startup {
 public:
  // This process's record; the first call fixes "now" as main()'s start.
  static Startup& process();

  // Ends phase `name` now.
  void mark(const std::string& name);
  // Marks "first_step" and runs the hook set by afterFirstStep, the first time only.
  void firstStepDone();
  // Sets the hook firstStepDone() runs (and arms it again); null: none.
  void afterFirstStep(std::function<void()> hook);

  std::vector<std::pair<std::string, double>> phases() const;
  // {"launch":0.01,...,"total":1.23}: the phases so far, in seconds, and their sum.
  std::string json() const;

 private:
  Startup();
  mutable std::mutex mutex_;  // the multi-rank tests run ranks as threads of one process
  std::vector<std::pair<std::string, double>> phases_;
  double last_;  // steady clock seconds at the end of the last phase
  bool firstStepDone_ = false;
  std::function<void()> afterFirstStep_;
};

}  // namespace pstrain::metrics
