#include "runtime/config/Codecs.h"

#include <fmt/format.h>

#include <cmath>

#include "runtime/Errors.h"

namespace pstrain::config {

const CodecInfo* codecRow(const std::string& spec) {
  const std::string name = spec.substr(0, spec.find(':'));
  for (const CodecInfo& row : kCodecs) {
    if (name == row.name) return &row;
  }
  return nullptr;
}

double codecParameter(const std::string& spec, const std::string& flag) {
  const auto colon = spec.find(':');
  if (colon == std::string::npos) return NAN;
  try {
    std::size_t used = 0;
    const double value = std::stod(spec.substr(colon + 1), &used);
    if (used == spec.size() - colon - 1) return value;
  } catch (const std::exception&) {
  }
  throw ConfigError(fmt::format("--{} '{}': '{}' is not a number", flag, spec, spec.substr(colon + 1)));
}

std::string codecSpecs(bool weights) {
  static const char* const kForms[] = {"", "[:LEVEL]", ":RATIO", ":RANK"};
  std::string list;
  for (const CodecInfo& row : kCodecs) {
    if (weights && row.unfitForWeights) continue;
    list += (list.empty() ? "" : ", ") + std::string(row.name) + kForms[static_cast<int>(row.parameter)];
  }
  return list;
}

const CodecInfo& checkedCodec(const std::string& spec, bool weights, const std::string& flag) {
  auto fail = [&](const std::string& why) { throw ConfigError(fmt::format("--{} '{}': {}", flag, spec, why)); };
  const CodecInfo* row = codecRow(spec);
  if (!row) fail("is not one of " + codecSpecs(weights));
  const bool hasParameter = spec.find(':') != std::string::npos;
  const double value = codecParameter(spec, flag);
  if (weights && row->unfitForWeights) fail(std::string(row->unfitForWeights) + "; use " + codecSpecs(true));
  switch (row->parameter) {
    case CodecParameter::None:
      if (hasParameter) fail("takes no parameter");
      break;
    case CodecParameter::Level:
      if (hasParameter && !(value >= 0 && value <= 9 && value == std::floor(value))) fail("the level is 0..9");
      break;
    case CodecParameter::Ratio:
      if (!(value > 0 && value <= 1)) fail(fmt::format("wants a RATIO in (0, 1], for example {}:0.01", row->name));
      break;
    case CodecParameter::Rank:
      if (!(value >= 1 && value <= 1024 && value == std::floor(value))) {
        fail(fmt::format("wants a whole RANK in 1..1024, for example {}:4", row->name));
      }
      break;
  }
  return *row;
}

bool isLossless(const std::string& spec) {
  const CodecInfo* row = codecRow(spec);
  return row && row->lossless;
}

bool errorFeedbackOn(Switch setting, const std::string& spec) {
  if (setting != Switch::Auto) return setting == Switch::On;
  const CodecInfo* row = codecRow(spec);
  return row && row->errorFeedbackByDefault;
}

std::string errorFeedbackDefaults() {
  std::string list;
  for (const CodecInfo& row : kCodecs) {
    if (row.errorFeedbackByDefault) list += (list.empty() ? "" : ", ") + std::string(row.name);
  }
  return list;
}

}  // namespace pstrain::config
