// The worker's device path on an accelerator, built twice: gpu_tests (CUDA, ctest label
// "gpu") and mps_tests (Apple's GPU, label "mps"), by PSTRAIN_TEST_DEVICE. Every test skips
// where that device is absent, so CI (neither) reports them skipped.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>

#include "data/Dataset.h"
#include "launcher/Device.h"
#include "models/Registry.h"
#include "runtime/config/RunPlan.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/roles/LocalTrainer.h"
#include "runtime/protocol/StepMessages.h"

using namespace pstrain;

namespace {

#ifndef PSTRAIN_TEST_DEVICE
#error "PSTRAIN_TEST_DEVICE names the device under test: \"cuda\" or \"mps\""
#endif
const c10::Device kDevice(PSTRAIN_TEST_DEVICE);

#define SKIP_WITHOUT_DEVICE() \
  if (!launcher::deviceAvailable(kDevice.type())) GTEST_SKIP() << "no " << kDevice << " device here"

// The up message of one worker step of `model` on batch 0 of synthetic data, computed on
// `device`, with the gradient handed over at the end of backward or bucket by bucket
// while it runs (then `bucketThreads` receives the thread that handed over each bucket).
std::vector<float> workerStep(const std::string& model, c10::Device device, bool streamed,
                              std::vector<std::thread::id>* bucketThreads = nullptr) {
  config::RunPlan cfg;
  cfg.model = model;
  cfg.batchSize = 16;
  const bool cifar = models::modelInfo(model).inputShape[0] == 3;
  const data::Dataset train =
      data::loadDataset(cifar ? "synthetic-cifar" : "synthetic", "", data::Split::Train, 64);
  torch::manual_seed(3);
  auto net = models::makeModel(model);
  net->to(device);
  protocol::StepMessages messages(models::parameterCount(*net), protocol::bufferCount(*net), 2);
  roles::LocalTrainer trainer(cfg, *net, train, device, messages, 0, 1, 1);
  std::vector<std::int64_t> handedOver;
  if (streamed) {
    trainer.streamGradients(protocol::gradientBuckets(*net, 64 * 1024), [&](const protocol::Bucket& bucket) {
      handedOver.push_back(bucket.begin);
      if (bucketThreads) bucketThreads->push_back(std::this_thread::get_id());
    });
  }
  trainer.loadWeights();
  trainer.computeGradient(0, 0);
  if (streamed) {
    const auto buckets = protocol::gradientBuckets(*net, 64 * 1024);
    EXPECT_EQ(handedOver.size(), buckets.size());
    for (std::size_t b = 0; b < std::min(handedOver.size(), buckets.size()); ++b) {
      EXPECT_EQ(handedOver[b], buckets[b].begin) << "bucket " << b << " out of order";
    }
  }
  const float* up = messages.up.data();
  return std::vector<float>(up, up + messages.grad.numel() + messages.workerBuffers.numel());
}

// max |a - b| / max |a|: the up message mixes gradients x 16 with BatchNorm variances.
double relativeDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, double(std::abs(a[i] - b[i])));
    scale = std::max(scale, double(std::abs(a[i])));
  }
  return worst / scale;
}

}  // namespace

// The hazard of --overlap on a GPU: autograd calls a CUDA leaf's hooks on its own device
// thread, not on the thread that called backward() (which waits meanwhile); a CPU leaf's
// on the calling thread. Hence MPI_THREAD_SERIALIZED (MpiSession).
TEST(Device, AutogradRunsCudaHooksOnItsDeviceThread) {
  SKIP_WITHOUT_DEVICE();
  if (!kDevice.is_cuda()) GTEST_SKIP() << "CUDA's autograd device thread";
  for (const c10::Device device : {c10::Device(c10::kCPU), kDevice}) {
    auto leaf = torch::ones({4}, torch::TensorOptions().device(device).requires_grad(true));
    std::thread::id hookThread;
    leaf.register_hook([&](const at::Tensor& g) { hookThread = std::this_thread::get_id(); });
    (leaf * 2).sum().backward();
    if (device.is_cpu()) {
      EXPECT_EQ(hookThread, std::this_thread::get_id()) << "CPU hooks ran on another thread";
    } else {
      EXPECT_NE(hookThread, std::this_thread::get_id()) << "CUDA hooks ran on the calling thread";
    }
  }
}

// A worker on the device fills the up message as one on the CPU does (gradient x batch
// size, then the buffers), with the gradient streamed in buckets during backward (on
// CUDA's device thread) or copied out after it.
TEST(Device, WorkerStepEqualsTheCpuStep) {
  SKIP_WITHOUT_DEVICE();
  at::globalContext().setAllowTF32CuDNN(false);
  for (const char* model : {"lenet", "resnet20"}) {
    const auto cpu = workerStep(model, c10::Device(c10::kCPU), false);
    std::vector<std::thread::id> threads;
    const auto streamed = workerStep(model, kDevice, true, &threads);
    const auto collected = workerStep(model, kDevice, false);
    // float32 sums in another order (cuDNN's, the CPU's); BatchNorm's backward over 16
    // samples amplifies them (measured on an H100: lenet 6.8e-5, resnet20 1.2e-3).
    const double vsCpu = relativeDiff(cpu, collected), vsStreamed = relativeDiff(collected, streamed);
    std::printf("%s: up message on %s vs cpu: relative diff %.3g; streamed vs collected: %.3g\n", model,
                kDevice.str().c_str(), vsCpu, vsStreamed);
    EXPECT_LE(vsCpu, 5e-3) << model;
    EXPECT_LE(vsStreamed, 1e-6) << model;
    ASSERT_FALSE(threads.empty());
    if (kDevice.is_cuda()) {
      EXPECT_NE(threads.front(), std::this_thread::get_id()) << model << ": buckets handed over on the calling thread";
    }
  }
}

// BatchNorm statistics travel as floats: read from and written into device buffers.
TEST(Device, BatchNormBuffersRoundTripThroughHostFloats) {
  SKIP_WITHOUT_DEVICE();
  torch::manual_seed(5);
  auto net = models::makeModel("resnet20");
  net->to(kDevice);
  net->train();
  {
    torch::NoGradGuard noGrad;
    net->forward(torch::randn({8, 3, 32, 32}, torch::TensorOptions().device(kDevice)));
  }
  const std::int64_t m = protocol::bufferCount(*net);
  at::Tensor host = torch::empty({m});
  protocol::readBuffers(*net, host);
  auto other = models::makeModel("resnet20");
  other->to(kDevice);
  protocol::writeBuffers(*other, host);
  auto mine = other->named_buffers();
  for (const auto& item : net->named_buffers()) {
    EXPECT_EQ(mine[item.key()].device().type(), kDevice.type());
    EXPECT_TRUE(torch::equal(mine[item.key()], item.value())) << item.key();
  }
}
