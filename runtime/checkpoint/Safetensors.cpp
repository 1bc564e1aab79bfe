#include "runtime/checkpoint/Safetensors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <set>

#include "runtime/Text.h"
#include "runtime/FileLimits.h"
#include "runtime/metrics/Json.h"
#include "runtime/zip/ElementTypes.h"
#include "runtime/zip/Json.h"

namespace pstrain::checkpoint {
namespace {

using zip::JsonValue;
using Json = JsonValue::Kind;

// One tensor's entry of the header, checked against the data's `size` bytes.
SafetensorsEntry entryOf(const std::string& name, const JsonValue& v, std::uint64_t size, const zip::Fail& fail) {
  const auto bad = [&](const std::string& what) {
    fail(fmt::format("tensor '{}': {}", printable(name), what));
    throw std::logic_error("zip::Fail returned");
  };
  if (v.kind != Json::Object) bad("its entry is not an object");
  SafetensorsEntry e;
  e.name = name;
  bool dtype = false, shape = false, offsets = false;
  for (const auto& [key, field] : v.members) {
    if (key == "dtype" && field.kind == Json::String) {
      e.dtype = field.text;
      dtype = true;
    } else if (key == "shape" && field.kind == Json::Array) {
      for (const JsonValue& d : field.items) {
        const auto size = d.count();
        if (!size || *size > kMaxElements) bad("its shape is not of counts");
        e.shape.push_back(static_cast<std::int64_t>(*size));
      }
      shape = true;
    } else if (key == "data_offsets" && field.kind == Json::Array && field.items.size() == 2 &&
               field.items[0].count() && field.items[1].count()) {
      e.begin = *field.items[0].count();
      e.end = *field.items[1].count();
      offsets = true;
    } else {
      bad(fmt::format("its entry has '{}', which is not a dtype, a shape or data offsets of the format",
                      printable(key)));
    }
  }
  if (!dtype || !shape || !offsets) bad("its entry lacks a dtype, a shape or data offsets");
  const zip::ElementType* type = zip::elementTypeOfCode(e.dtype);
  if (!type) bad(fmt::format("dtype '{}' is not one of the format's", printable(e.dtype)));
  if (e.begin > e.end || e.end > size) {
    bad(fmt::format("its data offsets [{}, {}) are not within the {} bytes of data", e.begin, e.end, size));
  }
  const auto elements = elementCount(e.shape);
  if (!elements || *elements * type->bytes != e.end - e.begin) {
    bad(fmt::format("its shape [{}] of {} holds {} bytes, its data offsets {}", fmt::join(e.shape, ", "), e.dtype,
                    elements ? fmt::format("{}", *elements * type->bytes) : std::string("more than 2^62 elements'"),
                    e.end - e.begin));
  }
  return e;
}

}  // namespace

std::uint64_t safetensorsHeaderLength(std::string_view first, std::uint64_t fileSize, const zip::Fail& fail) {
  if (fileSize < 8 || first.size() < 8) {
    fail(fmt::format("{} bytes: shorter than a safetensors header's length", fileSize));
  }
  const std::uint64_t n = zip::littleEndian(reinterpret_cast<const unsigned char*>(first.data()), 8);
  if (n > kMaxSafetensorsHeader) {
    fail(fmt::format("its header would be {} bytes, more than the format's {}", n, kMaxSafetensorsHeader));
  }
  if (n > fileSize - 8) fail(fmt::format("its header of {} bytes reaches past the file's end", n));
  if (n < 2) fail(fmt::format("its header is {} bytes: not a JSON object", n));
  return n;
}

SafetensorsHeader readSafetensorsHeader(std::string_view text, std::uint64_t fileSize, const zip::Fail& fail) {
  if (text.empty() || text[0] != '{') fail("its header does not begin with '{'");
  const JsonValue top = zip::parseJson(text, [&](const std::string& what) {
    fail(fmt::format("its header is not the JSON of the format: {}", what));
  });
  if (top.kind != Json::Object) fail("its header is not a JSON object");
  SafetensorsHeader header;
  header.dataStart = 8 + text.size();
  const std::uint64_t size = fileSize - header.dataStart;
  for (const auto& [name, value] : top.members) {
    if (name != "__metadata__") {
      header.tensors.push_back(entryOf(name, value, size, fail));
      continue;
    }
    if (value.kind != Json::Object) fail("its __metadata__ is not an object");
    for (const auto& [key, item] : value.members) {
      if (item.kind != Json::String) fail(fmt::format("its __metadata__ '{}' is not a string", printable(key)));
      header.metadata.emplace_back(key, item.text);
    }
  }
  // The data, covered whole: each tensor's bytes begin where the one before ends.
  std::vector<const SafetensorsEntry*> byOffset;
  for (const auto& e : header.tensors) byOffset.push_back(&e);
  std::sort(byOffset.begin(), byOffset.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t covered = 0;
  for (const SafetensorsEntry* e : byOffset) {
    if (e->begin != covered) {
      fail(fmt::format("tensor '{}' begins at byte {} of the data, where {} (a gap or an overlap)",
                       printable(e->name), e->begin, covered == 0 ? "the data begin at 0" : fmt::format("the one before ends at {}", covered)));
    }
    covered = e->end;
  }
  if (covered != size) fail(fmt::format("its tensors cover {} of the {} bytes of data after the header", covered, size));
  return header;
}

std::string writeSafetensorsHeader(std::vector<SafetensorsEntry>& tensors,
                                   const std::vector<std::pair<std::string, std::string>>& metadata) {
  std::string json = "{\"__metadata__\":{\"format\":\"pt\"";
  for (const auto& [key, value] : metadata) {
    if (key != "format") json += "," + metrics::jsonQuote(key) + ":" + metrics::jsonQuote(value);
  }
  json += "}";
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    SafetensorsEntry& e = tensors[i];
    std::uint64_t bytes = zip::elementTypeOfCode(e.dtype)->bytes;
    for (std::int64_t d : e.shape) bytes *= static_cast<std::uint64_t>(d);
    e.begin = at;
    e.end = at += bytes;
    json += fmt::format("{}{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                        ",", metrics::jsonQuote(e.name), e.dtype,
                        fmt::join(e.shape, ","), e.begin, e.end);
  }
  json += "}";
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>(json.size() >> (8 * i) & 0xFF);
  return out + json;
}

}  // namespace pstrain::checkpoint
