// The BLAS that pstrain computes with: found, told its thread count, and safe to call from
// several threads at once. The last is a race: a BLAS that is not safe (Debian's
// libopenblas0-serial, built without locking) fails it only some of the time; the
// ranks-as-threads tests (multirank.SyncThreads.TwoWorkersEqualOneProcessOnTheUnion: max
// diff up to 0.013 instead of 4.5e-08, in about half of the runs) more often.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <thread>
#include <vector>

#include "launcher/Device.h"
#include "runtime/Blas.h"
#include "runtime/Portable.h"

using namespace pstrain;

TEST(Blas, NamesTheLibraryThatDefinesSgemm) {
  const BlasInfo blas = launcher::processBlas();
  std::cout << "BLAS: " << blas.name << " (" << blas.library << ")" << std::endl;
  EXPECT_FALSE(blas.name.empty());
  if (!blas.library.empty()) {  // empty only for a libtorch with its BLAS linked in
    EXPECT_TRUE(std::filesystem::exists(blas.library)) << blas.library;
    EXPECT_NE(portable::symbolAddress("sgemm_", blas.library), nullptr);
  }
  EXPECT_EQ(portable::symbolAddress("no_such_symbol_anywhere"), nullptr);
  EXPECT_EQ(portable::libraryDefining("no_such_symbol_anywhere"), "");
}

TEST(Blas, ComputeThreadsReachOpenBlas) {
  const std::string library = portable::libraryDefining("sgemm_");
  using GetThreads = int (*)();
  auto get = reinterpret_cast<GetThreads>(portable::symbolAddress("openblas_get_num_threads", library));
  if (!get) GTEST_SKIP() << "not OpenBLAS: " << launcher::processBlas().name;
  using Parallel = int (*)();
  auto parallel = reinterpret_cast<Parallel>(portable::symbolAddress("openblas_get_parallel", library));
  if (parallel && parallel() == 0) GTEST_SKIP() << "OpenBLAS's serial build: one thread, always";
  for (int threads : {1, 2, 1}) {
    launcher::setComputeThreads(threads);
    EXPECT_EQ(at::get_num_threads(), threads);
    EXPECT_EQ(get(), threads);
  }
}

TEST(Blas, ConcurrentCallsGiveTheProductsOfSingleCalls) {
  launcher::setComputeThreads(1);
  torch::manual_seed(0);
  constexpr int kThreads = 4, kShapes = 6, kRounds = 100;
  std::vector<torch::Tensor> a, b, alone;
  for (int i = 0; i < kThreads * kShapes; ++i) {  // each thread its own shapes, as workers' layers
    a.push_back(torch::randn({16 + 8 * i, 100 + 10 * i}));
    b.push_back(torch::randn({100 + 10 * i, 40 + 4 * i}));
    alone.push_back(torch::mm(a[i], b[i]));
  }
  std::vector<double> worst(kThreads, 0.0);
  std::vector<std::thread> callers;
  for (int t = 0; t < kThreads; ++t) {
    callers.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        for (int i = t * kShapes; i < (t + 1) * kShapes; ++i) {
          worst[t] = std::max(worst[t], (torch::mm(a[i], b[i]) - alone[i]).abs().max().item<double>());
        }
      }
    });
  }
  for (auto& caller : callers) caller.join();
  EXPECT_EQ(*std::max_element(worst.begin(), worst.end()), 0.0)
      << launcher::processBlas().name << " computes wrong products when called from " << kThreads
      << " threads at once";
}
