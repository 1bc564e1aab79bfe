// The update from summed up messages (roles/SummedUpdate): its finite check.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "runtime/roles/SummedUpdate.h"

using namespace pstrain;

// The server's check of a summed gradient: finite extremes pass, one Inf or NaN anywhere
// (including the vectorised loop's tail) fails.
TEST(AllFinite, FindsAnyInfOrNanAndPassesFiniteExtremes) {
  at::Tensor values = torch::randn({1003});
  values[0] = std::numeric_limits<float>::max();
  values[1] = -std::numeric_limits<float>::max();
  values[2] = std::numeric_limits<float>::denorm_min();
  values[3] = -0.0f;
  EXPECT_TRUE(roles::allFinite(values));
  EXPECT_TRUE(roles::allFinite(torch::zeros({0})));
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    for (std::int64_t at : {0, 517, 1002}) {
      at::Tensor copy = values.clone();
      copy[at] = bad;
      EXPECT_FALSE(roles::allFinite(copy)) << bad << " at " << at;
    }
  }
}
