#include "runtime/rundir/RunFiles.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "runtime/metrics/EventFile.h"

namespace pstrain::rundir {

namespace fs = std::filesystem;

std::vector<std::string> runFiles(const std::string& trainDir) {
  std::vector<std::string> names = {kCheckpoints, kMetrics,  kTrainedModel, kTrainedScript, kTrainedOptimizer,
                                    kEvalCsv,     kEvalJsonl, kRunJson,     kPlots};
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(trainDir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(metrics::kEventFilePrefix, 0) == 0) names.push_back(name);
  }
  return names;
}

const std::vector<std::string>& finalFiles() {
  static const std::vector<std::string> names = {kTrainedModel, kTrainedScript, kTrainedOptimizer};
  return names;
}

std::string pathOf(const std::string& trainDir, const std::string& name) { return (fs::path(trainDir) / name).string(); }

std::string checkpointName(std::int64_t step) { return fmt::format("step-{:08d}", step); }

std::optional<std::int64_t> checkpointStep(const std::string& fileName, const std::string& extension) {
  constexpr std::size_t kPrefix = 5;  // "step-"
  if (fileName.size() <= kPrefix + extension.size() || fileName.compare(0, kPrefix, "step-") != 0 ||
      fileName.compare(fileName.size() - extension.size(), extension.size(), extension) != 0) {
    return std::nullopt;
  }
  const std::string digits = fileName.substr(kPrefix, fileName.size() - kPrefix - extension.size());
  // 8 digits as written; at most 18, so that the number fits an int64 (a longer name is not ours).
  if (digits.size() < 8 || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return std::stoll(digits);
}

std::vector<Published> listPublished(const std::string& dir) {
  std::vector<Published> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return found;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (const auto step = checkpointStep(entry.path().filename().string(), ".ok")) {
      found.push_back({*step, (fs::path(dir) / (checkpointName(*step) + ".pt")).string()});
    }
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return found;
}

}  // namespace pstrain::rundir
