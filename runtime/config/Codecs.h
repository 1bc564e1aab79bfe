#pragma once
// The gradient and weight codecs (--compress, --compress-weights), one row each: a codec's
// name, its wire id, what its spec may say after the name ("topk:0.01"), whether it may encode
// weights, and the spec --probe times of it. Each row's class is in runtime/codec (Codec.cpp,
// one maker per row, found by the row's name). Torch-free.
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>

#include "runtime/config/Switch.h"

namespace pstrain::config {

// What a codec's spec may say after its name.
enum class CodecParameter {
  None,   // nothing: "fp16"
  Level,  // optional, a whole number 0..9: "zlib", "zlib:6"
  Ratio,  // required, in (0, 1]: "topk:0.01"
  Rank,   // required, a whole number 1..1024: "powersgd:4"
};

struct CodecInfo {
  const char* name;
  std::uint8_t wireId;          // goes into every frame, so that a payload of another codec is
                                // refused: never change a codec's id, give a new one the next
  CodecParameter parameter;
  const char* unfitForWeights;  // why it may not encode weights; null: it may
  bool errorFeedbackByDefault;  // --error-feedback auto: on for codecs that drop information on purpose
  bool lossless;                // decodes to exactly what was encoded
  const char* probed;           // the spec --probe times, null: not timed
};

// The codec spec of raw floats, the identity coding.
constexpr const char* kRawCodec = "none";
// diloco's codec both ways unless told otherwise (--compress auto): 4-bit values with a scale
// per block, a seventh of float32's bytes.
constexpr const char* kFrugalCodec = "int4";

// clang-format off
inline constexpr CodecInfo kCodecs[] = {
  {kRawCodec,  0, CodecParameter::None,  nullptr, false, true,  kRawCodec},
  {"zlib",     1, CodecParameter::Level, nullptr, false, true,  nullptr},
  {"fp16",     2, CodecParameter::None,  nullptr, false, false, "fp16"},
  {"bf16",     3, CodecParameter::None,  nullptr, false, false, nullptr},
  {"int8",     4, CodecParameter::None,  nullptr, false, false, nullptr},
  {"int4",     8, CodecParameter::None,  nullptr, false, false, "int4"},
  {"topk",     5, CodecParameter::Ratio, "sparsified weights make no sense", true, false, "topk:0.01"},
  {"randomk",  6, CodecParameter::Ratio, "sparsified weights make no sense", true, false, nullptr},
  {"powersgd", 7, CodecParameter::Rank,  "low-rank weights make no sense",   true, false, "powersgd:4"},
};
// clang-format on
constexpr std::size_t kCodecCount = std::size(kCodecs);

// The row of `spec`'s name (before any ':'); null for an unknown name.
const CodecInfo* codecRow(const std::string& spec);
// Checks `spec` (ConfigError naming --`flag`: an unknown name lists the specs, a malformed
// parameter says its form); `weights`: only the rows fit for weights. Returns its row.
const CodecInfo& checkedCodec(const std::string& spec, bool weights, const std::string& flag);
// The number after the ':' (a ratio, a rank, a level); NaN where the spec gives none.
double codecParameter(const std::string& spec, const std::string& flag);
// "none, zlib[:LEVEL], fp16, ..., topk:RATIO, ...": every spec form, or those fit for weights.
std::string codecSpecs(bool weights);
// Whether `spec` gives back exactly what it was given (none, zlib).
bool isLossless(const std::string& spec);
// Whether error feedback runs for gradient codec `spec` under --error-feedback `setting`:
// on, off, or auto (on for the rows that drop information on purpose: topk, randomk, powersgd).
bool errorFeedbackOn(Switch setting, const std::string& spec);
// "topk, randomk, powersgd": the rows whose error feedback is on by default.
std::string errorFeedbackDefaults();

}  // namespace pstrain::config
