// Run under `mpirun -np 3` (a server and two workers sharing one GPU, as two workers share
// a Mac's): each case trains a few sync steps with the workers on the CPU, then again with
// them on CUDA, and the final weights must agree: codecs encoding gradients that left the
// GPU, a BatchNorm model (its statistics travel as buffers), overlap on and off, and
// --precision fp16 (with its loss scaling) against float32 on the CPU. Rank 0
// prints a line per case and sets the exit code; 77 ("skipped") where no GPU is visible.
// argv[1]: a scratch directory.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "models/StateDict.h"
#include "runtime/comm/mpi/MpiComm.h"
#include "runtime/training/Training.h"
#include "tests/common/Reference.h"

using namespace pstrain;

namespace {

struct Case {
  const char* name;
  const char* model;
  const char* compress;
  const char* overlap;
  const char* precision;  // the CUDA workers'; the CPU run is float32
  std::int64_t steps;
  double tolerance;
};

}  // namespace

int main(int argc, char** argv) {
  comm::mpi::MpiSession mpi(&argc, &argv);
  comm::mpi::MpiComm comm;
  comm.connect(true);
  if (argc < 2) {
    std::cerr << "usage: device_training SCRATCH_DIR\n";
    return 2;
  }
  if (!torch::cuda::is_available()) {
    if (comm.rank() == 0) std::printf("skipped: no CUDA device\n");
    return 77;
  }
  at::globalContext().setAllowTF32CuDNN(false);
  torch::set_num_threads(2);
  // Float32 sums in another order (cuDNN's, the CPU's) make the two runs drift apart
  // chaotically: the limits leave room for that, not for a missing or doubled gradient. An
  // fp16 value may round the other way; topk keeps other elements near its threshold, which
  // error feedback applies a step later; BatchNorm over 16 samples amplifies most, so those
  // runs are shorter.
  const Case cases[] = {
      {"mlp (no pooling), exact", "mlp", "none", "on", "fp32", 10, 1e-4},
      {"lenet, exact", "lenet", "none", "on", "fp32", 10, 1e-4},
      {"lenet, fp16 gradients", "lenet", "fp16", "on", "fp32", 10, 1e-3},
      {"lenet, topk:0.01 gradients", "lenet", "topk:0.01", "on", "fp32", 10, 5e-3},
      {"resnet20 (BatchNorm), overlap on", "resnet20", "none", "on", "fp32", 3, 1e-3},
      {"resnet20 (BatchNorm), overlap off", "resnet20", "none", "off", "fp32", 3, 1e-3},
      // float16's 11-bit mantissa in every product: near the float32 run, not equal to it.
      {"lenet, --precision fp16 (loss scaled)", "lenet", "none", "on", "fp16", 10, 2e-2},
  };
  int failed = 0;
  try {
    for (const Case& c : cases) {
      auto cfg = testsupport::smallSyntheticConfig(argv[1]);
      cfg.model = c.model;
      cfg.compress = c.compress;
      cfg.overlap = std::string(c.overlap) == "on" ? config::OnOff::On : config::OnOff::Off;
      cfg.steps = c.steps;
      cfg.checkpointEvery = 0;
      if (models::modelInfo(cfg.model).inputShape[0] == 3) cfg.dataset = "synthetic-cifar";
      data::Dataset train = data::loadDataset(cfg.dataset, "", data::Split::Train, cfg.syntheticSize);
      checkpoint::TensorList trained[2], initial;
      for (int onGpu = 0; onGpu < 2; ++onGpu) {
        cfg.trainDir = std::string(argv[1]) + "/" + std::to_string(&c - cases) + (onGpu ? "-cuda" : "-cpu");
        const c10::Device device = comm.rank() == 0 || !onGpu ? c10::Device(c10::kCPU) : c10::Device(c10::kCUDA, 0);
        cfg.precision = onGpu ? c.precision : "fp32";
        torch::manual_seed(cfg.seed);
        auto model = models::makeModel(cfg.model);
        if (onGpu == 0) initial = testsupport::cloneState(models::stateDict(*model));
        model->to(device);
        training::runTraining(comm, config::RunPlan(cfg), *model, comm.rank() == 0 ? nullptr : &train, device, {});
        if (comm.rank() == 0) trained[onGpu] = checkpoint::readStateDict(cfg.trainDir + "/trained_model.pt");
      }
      if (comm.rank() != 0) continue;
      const double diff = testsupport::maxAbsDiff(trained[0], trained[1]);
      for (std::size_t k = 0; k < trained[0].size(); ++k) {  // diagnostics: the keys that differ most
        const double d = (trained[0][k].second - trained[1][k].second).abs().max().item<double>();
        const double scale = trained[0][k].second.abs().max().item<double>();
        if (d > c.tolerance / 10) std::printf("    %-28s diff %.3g, max |value| %.3g\n", trained[0][k].first.c_str(), d, scale);
      }
      const double moved = testsupport::maxAbsDiff(initial, trained[1]);
      const bool ok = diff <= c.tolerance && moved > 1e-3;
      std::printf("%-36s workers on cuda vs on cpu: max abs diff %.3g (limit %.0e), weights moved %.3g  %s\n", c.name,
                  diff, c.tolerance, moved, ok ? "ok" : "FAILED");
      failed += !ok;
    }
  } catch (const std::exception& e) {
    std::cerr << "rank " << comm.rank() << ": " << e.what() << std::endl;
    comm::mpi::MpiSession::abortJob(1);
  }
  return failed == 0 ? 0 : 1;
}
