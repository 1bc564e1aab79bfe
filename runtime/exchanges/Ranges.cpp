#include "runtime/exchanges/Ranges.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "runtime/Errors.h"

namespace pstrain::exchanges {
namespace {

std::int64_t elementsOf(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

// The cut for `target` in (after, below): the tensor boundary nearest it if that is within
// `slack`, else the kCutAlignFloats multiple (from its tensor's start) nearest it; -1 if none.
std::int64_t cutFor(const std::vector<std::int64_t>& starts, std::int64_t target, std::int64_t after,
                    std::int64_t below, std::int64_t slack) {
  auto allowed = [&](std::int64_t cut) { return cut > after && cut < below; };
  auto nearer = [&](std::int64_t cut, std::int64_t best) {
    return allowed(cut) && (best < 0 || std::llabs(cut - target) < std::llabs(best - target)) ? cut : best;
  };
  std::int64_t boundary = -1;
  for (std::int64_t start : starts) boundary = nearer(start, boundary);
  if (boundary >= 0 && std::llabs(boundary - target) <= slack) return boundary;
  std::int64_t inside = boundary;
  for (std::size_t t = 0; t + 1 < starts.size(); ++t) {
    if (target <= starts[t] || target >= starts[t + 1]) continue;
    const std::int64_t down = starts[t] + (target - starts[t]) / kCutAlignFloats * kCutAlignFloats;
    inside = nearer(down, inside);
    inside = nearer(std::min(down + kCutAlignFloats, starts[t + 1]), inside);
  }
  return inside;
}

}  // namespace

std::vector<KeyRange> keyRanges(const codec::Shapes& shapes, int servers, bool wholeTensors) {
  std::vector<std::int64_t> starts{0};
  for (const auto& shape : shapes) starts.push_back(starts.back() + elementsOf(shape));
  const std::int64_t total = starts.back();
  if (servers < 1 || total < servers) {
    throw CollectiveConfigError(fmt::format("--servers {}: the model has {} parameters, fewer than one per server", servers, total));
  }
  if (wholeTensors && static_cast<std::int64_t>(shapes.size()) < servers) {
    throw CollectiveConfigError(fmt::format("--servers {}: the model has {} parameter tensors, and its ranges keep "
                                            "tensors whole: use at most {} servers", servers, shapes.size(),
                                            shapes.size()));
  }
  std::vector<std::int64_t> cuts{0};
  for (int k = 1; k < servers; ++k) {
    const std::int64_t target = total * k / servers;
    // Leave at least one float (whole tensors: one tensor) to each later range; a model of
    // very few floats may have no allowed cut left, then any float boundary does.
    const std::int64_t slack = wholeTensors ? total : total / servers / 8;
    const std::int64_t below = wholeTensors ? starts[shapes.size() - servers + k + 1] : total - (servers - k - 1);
    std::int64_t cut = cutFor(starts, target, cuts.back(), below, slack);
    if (cut < 0) cut = std::max(cuts.back() + 1, std::min(target, total - (servers - k)));
    cuts.push_back(cut);
  }
  cuts.push_back(total);
  std::vector<KeyRange> ranges;
  for (int k = 0; k < servers; ++k) {
    KeyRange r{cuts[k], cuts[k + 1], {}};
    for (std::size_t t = 0; t < shapes.size(); ++t) {
      const std::int64_t begin = std::max(starts[t], r.begin), end = std::min(starts[t + 1], r.end);
      if (begin >= end) continue;
      if (begin == starts[t] && end == starts[t + 1]) {
        r.shapes.push_back(shapes[t]);
      } else {
        r.shapes.push_back({end - begin});
      }
    }
    ranges.push_back(std::move(r));
  }
  return ranges;
}

}  // namespace pstrain::exchanges
