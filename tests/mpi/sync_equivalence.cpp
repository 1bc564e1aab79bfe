// Run under `mpirun -np 3`: sync PS with 2 workers at batch b for 20 steps must end with
// the weights (max abs diff <= 1e-5) of one process training at batch 2b on the union of
// the same samples, with the exchange overlapping backward (buckets) and without (one
// reduction of the whole gradient). Rank 0 checks and sets the exit code. argv[1]: a
// scratch directory.
#include <torch/torch.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "runtime/comm/mpi/MpiComm.h"
#include "runtime/roles/Training.h"
#include "tests/common/Reference.h"

using namespace pstrain;

int main(int argc, char** argv) {
  comm::MpiSession mpi(&argc, &argv);
  comm::MpiComm comm;
  if (argc < 2) {
    std::cerr << "usage: sync_equivalence SCRATCH_DIR\n";
    return 2;
  }
  torch::set_num_threads(1);
  auto cfg = testsupport::smallSyntheticConfig(argv[1]);
  try {
    data::Dataset train = data::loadDataset(cfg.dataset, "", data::Split::Train, cfg.syntheticSize);
    torch::manual_seed(cfg.seed);
    auto reference = models::makeModel(cfg.model);
    const auto initial = testsupport::cloneState(models::stateDict(*reference));
    if (comm.rank() == 0) testsupport::trainReference(*reference, train, cfg, comm.size() - 1, cfg.steps);
    int failed = 0;
    for (const std::string overlap : {"on", "off"}) {
      cfg.overlap = overlap;
      cfg.trainDir = std::string(argv[1]) + "/overlap-" + overlap;
      torch::manual_seed(cfg.seed);
      auto model = models::makeModel(cfg.model);
      roles::runTraining(comm, cfg, *model, comm.rank() == 0 ? nullptr : &train, c10::Device(c10::kCPU), {});
      if (comm.rank() != 0) continue;
      auto trained = checkpoint::readStateDict(cfg.trainDir + "/trained_model.pt");
      double diff = testsupport::maxAbsDiff(models::stateDict(*reference), trained);
      double moved = testsupport::maxAbsDiff(initial, trained);
      std::printf("sync PS (%d workers, --overlap %s) vs single process: max abs diff %.3g (weights moved by up to %.3g)\n",
                  comm.size() - 1, overlap.c_str(), diff, moved);
      if (!(diff <= 1e-5 && moved > 1e-3)) ++failed;
    }
    return failed == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "rank " << comm.rank() << ": " << e.what() << std::endl;
    comm::MpiSession::abortJob(1);
  }
}
