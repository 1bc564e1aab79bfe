#pragma once
// A strict JSON reader (RFC 8259) for files someone else wrote: safetensors headers, the
// hub's model.safetensors.index.json. Torch-free. Nesting is bounded (kMaxNesting,
// FileLimits.h), every string is valid UTF-8 once its escapes are read (raw bytes that are
// not UTF-8 are refused, never passed on), an object names each member once.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/zip/ZipDirectory.h"

namespace pstrain::zip {

struct JsonValue {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool boolean = false;
  std::string text;  // String: its text; Number: its literal
  std::vector<std::pair<std::string, JsonValue>> members;  // Object, in order
  std::vector<JsonValue> items;                            // Array

  // A Number that is a non-negative integer below 2^64 ("12", not "1.0" nor "-1"): its value.
  std::optional<std::uint64_t> count() const;
  // An Object's member `name`, or null.
  const JsonValue* member(std::string_view name) const;
};

// The JSON document `text`; calls `fail` (which must throw) with what is wrong and where.
JsonValue parseJson(std::string_view text, const Fail& fail);

// Whether `text` is valid UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF).
bool validUtf8(std::string_view text);

}  // namespace pstrain::zip
