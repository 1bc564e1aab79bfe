// Run under `mpirun -np 3`: sync PS with 2 workers at batch b for 20 steps must end with
// the weights of one process training at batch 2b on the union of the same samples (on the
// CPU), with the exchange overlapping backward (buckets) and without (one reduction of the
// whole gradient). Rank 0 checks and sets the exit code. argv[1]: a scratch directory;
// argv[2]: the workers' device (default cpu; on cuda or mps the tolerance is 1e-4 instead
// of 1e-5, TF32 is off, and the exit code is 77, "skipped", where the device is absent:
// ctest runs it as gpu.sync_equivalence and mps.sync_equivalence).
#include <torch/torch.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "models/StateDict.h"
#include "launcher/Device.h"
#include "runtime/comm/mpi/MpiComm.h"
#include "runtime/training/Training.h"
#include "tests/common/Reference.h"

using namespace pstrain;

int main(int argc, char** argv) {
  comm::mpi::MpiSession mpi(&argc, &argv);
  comm::mpi::MpiComm comm;
  comm.connect(true);
  if (argc < 2) {
    std::cerr << "usage: sync_equivalence SCRATCH_DIR [DEVICE]\n";
    return 2;
  }
  const c10::Device device(argc > 2 ? argv[2] : "cpu");
  if (!launcher::deviceAvailable(device.type())) {
    if (comm.rank() == 0) std::printf("skipped: no %s device\n", device.str().c_str());
    return 77;
  }
  // Exact float32 convolutions on the GPU: with TF32 (PyTorch's default for cuDNN) a step
  // differs from the CPU's by about 1e-3, not by rounding.
  at::globalContext().setAllowTF32CuDNN(false);
  const double tolerance = device.is_cpu() ? 1e-5 : 1e-4;
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
      cfg.overlap = overlap == "on" ? config::OnOff::On : config::OnOff::Off;
      cfg.trainDir = std::string(argv[1]) + "/overlap-" + overlap;
      torch::manual_seed(cfg.seed);
      auto model = models::makeModel(cfg.model);
      const c10::Device mine = comm.rank() == 0 ? c10::Device(c10::kCPU) : device;
      model->to(mine);
      training::runTraining(comm, config::RunPlan(cfg), *model, comm.rank() == 0 ? nullptr : &train, mine, {});
      if (comm.rank() != 0) continue;
      auto trained = checkpoint::readStateDict(cfg.trainDir + "/trained_model.pt");
      double diff = testsupport::maxAbsDiff(models::stateDict(*reference), trained);
      double moved = testsupport::maxAbsDiff(initial, trained);
      std::printf("sync PS (%d workers on %s, --overlap %s) vs single process: max abs diff %.3g (weights moved by up to %.3g)\n",
                  comm.size() - 1, device.str().c_str(), overlap.c_str(), diff, moved);
      if (!(diff <= tolerance && moved > 1e-3)) ++failed;
    }
    return failed == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "rank " << comm.rank() << ": " << e.what() << std::endl;
    comm::mpi::MpiSession::abortJob(1);
  }
}
