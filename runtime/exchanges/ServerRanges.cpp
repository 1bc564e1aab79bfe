#include "runtime/exchanges/ServerRanges.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/Errors.h"
#include "runtime/protocol/FlatParameters.h"

namespace pstrain::exchanges {

bool rangesKeepTensorsWhole(const config::TrainConfig& cfg) {
  return cfg.compressesGradients() || cfg.compressesWeights();
}

std::vector<KeyRange> serverRanges(const models::Net& model, const config::TrainConfig& cfg) {
  const codec::Shapes shapes = protocol::parameterShapes(model);
  const bool whole = rangesKeepTensorsWhole(cfg);
  if (whole && static_cast<std::int64_t>(shapes.size()) < cfg.servers) {  // the codecs that keep them whole, by name
    std::vector<std::string> codecs, drop;
    if (cfg.compressesGradients()) codecs.push_back("--compress " + cfg.gradientCodec()), drop.push_back("--compress none");
    if (cfg.compressesWeights()) {
      codecs.push_back("--compress-weights " + cfg.weightCodec());
      drop.push_back("--compress-weights none");
    }
    throw CollectiveConfigError(fmt::format("--servers {}: the model has {} parameter tensors, and {} codes each tensor "
                                            "whole on one server: use at most {} servers, or {}", cfg.servers,
                                            shapes.size(), fmt::join(codecs, " and "), shapes.size(),
                                            fmt::join(drop, " and ")));
  }
  return keyRanges(shapes, cfg.servers, whole);
}

}  // namespace pstrain::exchanges
