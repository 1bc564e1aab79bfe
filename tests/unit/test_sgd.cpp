// The server's SGD in pieces and in one pass (runtime/optim/Sgd).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "runtime/optim/Sgd.h"

using namespace pstrain;

// The server updates each gradient bucket as soon as it is reduced: stepping every slice
// must equal one step over the whole buffer, momentum and Nesterov included.
TEST(Sgd, SlicesEqualTheWholeBuffer) {
  for (bool nesterov : {false, true}) {
    torch::manual_seed(5);
    at::Tensor whole = torch::randn({100}), sliced = whole.clone();
    optim::Sgd a({0.9, 1e-3, nesterov}), b({0.9, 1e-3, nesterov});
    for (int step = 0; step < 5; ++step) {
      at::Tensor grad = torch::randn({100});
      at::Tensor g1 = grad.clone(), g2 = grad.clone();
      a.step(whole, g1, 0.1);
      for (std::int64_t begin : {60, 20, 0}) {  // any order, as buckets arrive
        std::int64_t end = begin == 60 ? 100 : begin == 20 ? 60 : 20;
        b.stepSlice(sliced.narrow(0, begin, end - begin), g2.narrow(0, begin, end - begin), 0.1, begin, 100);
      }
    }
    EXPECT_LE((whole - sliced).abs().max().item<double>(), 1e-7) << "nesterov " << nesterov;
  }
}

// The server's update in one pass: the gradient divided by the sample count in the same
// loop gives exactly the values of dividing first, and the step itself tells whether its
// gradient was finite (a non-finite value anywhere, the loop's tail included).
TEST(Sgd, FusedDivisionAndFiniteCheck) {
  for (bool nesterov : {false, true}) {
    for (double decay : {0.0, 1e-3}) {
      torch::manual_seed(7);
      at::Tensor fused = torch::randn({1003}), separate = fused.clone();
      optim::Sgd a({0.9, decay, nesterov}), b({0.9, decay, nesterov});
      for (int step = 0; step < 3; ++step) {
        at::Tensor grad = torch::randn({1003}) * 64;
        at::Tensor g1 = grad.clone(), g2 = grad.clone();
        EXPECT_TRUE(a.step(fused, g1, 0.1, 64.0));
        g2.div_(64.0);
        EXPECT_TRUE(b.step(separate, g2, 0.1));
      }
      EXPECT_TRUE(fused.equal(separate)) << "nesterov " << nesterov << " decay " << decay;
    }
  }
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    for (std::int64_t at : {0, 517, 1002}) {
      for (double lr : {0.1, 0.0}) {  // lr 0 too: 0 x Inf is NaN
        at::Tensor weights = torch::randn({1003}), grad = torch::randn({1003});
        grad[at] = bad;
        optim::Sgd sgd({0.9, 0, false});
        EXPECT_FALSE(sgd.step(weights, grad, lr, 2.0)) << bad << " at " << at << " lr " << lr;
      }
    }
  }
  // An update that overflows the weights fails as well.
  at::Tensor big = torch::full({10}, std::numeric_limits<float>::max()), push = torch::full({10}, -1.0f);
  optim::Sgd plain({0, 0, false});
  EXPECT_FALSE(plain.step(big, push, std::numeric_limits<float>::max()));
}

// Rank 0's update runs in ranges on its intra-op threads (optim::inRanges): 1 and 4 threads
// give the same weights, state and sum of squares, bit for bit, and a non-finite gradient in
// the last range is still seen. 5 ranges and a bit of 2^16 floats.
TEST(Sgd, UpdatesOnThreadsEqualOneThread) {
  const std::int64_t n = 5 * optim::kRangeFloats + 123;
  torch::manual_seed(7);
  const torch::Tensor weights = torch::randn({n}), grad = torch::randn({n});
  const int before = at::get_num_threads();
  auto run = [&](const std::string& name, int threads) {
    at::set_num_threads(threads);
    auto optimizer = optim::makeOptimizer(name, optim::Hyperparameters{0.9, true, 0.01});
    torch::Tensor w = weights.clone();
    double squares = 0;
    for (int step = 0; step < 3; ++step) {
      torch::Tensor g = grad.clone();
      squares += optim::sumOfSquares(g);
      EXPECT_TRUE(optimizer->step(w, g, 0.01, 3.0));
    }
    return std::make_pair(w, squares);
  };
  for (const std::string name : {"sgd", "adamw"}) {
    const auto [one, squaresOne] = run(name, 1);
    const auto [four, squaresFour] = run(name, 4);
    EXPECT_TRUE(torch::equal(one, four)) << name;
    EXPECT_EQ(squaresOne, squaresFour) << name;
  }
  at::set_num_threads(4);
  auto optimizer = optim::makeOptimizer("adamw", optim::Hyperparameters{});
  torch::Tensor w = weights.clone(), g = grad.clone();
  g[n - 1] = NAN;
  EXPECT_FALSE(optimizer->step(w, g, 0.01));
  at::set_num_threads(before);
}
