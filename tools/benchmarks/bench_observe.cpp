// What watching a run costs per step (tools/bench, "observability"): the stall bookkeeping
// (each rank tells the others the step it waits in: MpiComm's arrivals) and rank 0's
// TensorBoard event file.
//   mpirun -np N bench_observe STEPS ROUNDS DIR
// Each round times STEPS steps of one barrier each (the smallest step a rank can take)
// with --stall-warning's bookkeeping on and then off, and STEPS writes of a metrics line's
// 23 scalars to an event file in DIR. Rank 0 prints one JSON line: the medians over the
// rounds, in microseconds.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "runtime/Stop.h"
#include "runtime/comm/mpi/MpiComm.h"
#include "runtime/metrics/EventFile.h"

using namespace pstrain;

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

template <typename F>
double microsecondsPerCall(int calls, F&& call) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) call(i);
  return 1e6 * std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / calls;
}

}  // namespace

int main(int argc, char** argv) {
  comm::mpi::MpiSession mpi(&argc, &argv);
  if (argc < 4) {
    std::cerr << "usage: bench_observe STEPS ROUNDS DIR\n";
    comm::mpi::MpiSession::abortJob(2);
  }
  const int steps = std::atoi(argv[1]), rounds = std::atoi(argv[2]);
  const std::string dir = argv[3];
  comm::mpi::MpiComm comm;
  comm.connect(true);
  std::int64_t step = 0;
  auto barrierStep = [&](int) {
    currentStep() = step++;
    comm.barrier("bench");
  };
  metrics::Scalars line;
  for (int i = 0; i < 23; ++i) line.emplace_back(fmt::format("group/metric_{}", i), 0.001 * i);
  std::vector<double> with, without, events;
  for (int round = 0; round < rounds; ++round) {
    comm.setStallWarningSeconds(60);
    with.push_back(microsecondsPerCall(steps, barrierStep));
    comm.setStallWarningSeconds(0);
    without.push_back(microsecondsPerCall(steps, barrierStep));
    if (comm.rank() == 0) {
      metrics::EventFile file(dir);
      events.push_back(microsecondsPerCall(steps, [&](int i) { file.write(i, line); }));
    }
  }
  if (comm.rank() == 0) {
    std::cout << fmt::format("{{\"ranks\":{},\"step_us_with_stall\":{:.2f},\"step_us_without_stall\":{:.2f},"
                             "\"event_write_us\":{:.2f},\"with_rounds\":[{:.2f}],\"without_rounds\":[{:.2f}]}}",
                             comm.size(), median(with), median(without), median(events), fmt::join(with, ","),
                             fmt::join(without, ","))
              << std::endl;
  }
  return 0;
}
