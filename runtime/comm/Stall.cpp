#include "runtime/comm/Stall.h"

#include <fmt/format.h>

#include <cmath>
#include <functional>

namespace pstrain::comm {

std::string describeMissing(int self, std::int64_t mine, const std::vector<RankNews>& news,
                            const std::vector<std::string>& hosts, int awaited) {
  const int ranks = static_cast<int>(news.size());
  auto others = [&](const std::function<bool(int)>& keep) {
    std::vector<int> picked;
    for (int r = 0; r < ranks; ++r) {
      if (r != self && keep(r)) picked.push_back(r);
    }
    return picked;
  };
  std::vector<int> named = others([&](int r) { return news[r].silent; });
  if (named.empty()) named = others([&](int r) { return news[r].lastStep < mine; });
  if (named.empty()) named = others([&](int r) { return awaited < 0 || r == awaited; });
  std::string text;
  for (int r : named) {
    if (!text.empty()) text += "; ";
    text += fmt::format("rank {}", r);
    if (r < static_cast<int>(hosts.size()) && !hosts[r].empty()) text += fmt::format(" ({})", hosts[r]);
    text += news[r].lastStep < 0 ? std::string(", no step yet") : fmt::format(", last at step {}", news[r].lastStep);
  }
  return text.empty() ? "the other ranks" : text;
}

std::string stallLine(std::int64_t mine, double waitedSeconds, const std::string& missing) {
  return fmt::format("pstrain: {}: waiting {:.0f} s for {}", mine < 0 ? "start-up" : fmt::format("step {}", mine),
                     std::floor(waitedSeconds), missing);
}

}  // namespace pstrain::comm
