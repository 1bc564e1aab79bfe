#include "runtime/metrics/Json.h"

#include <fmt/format.h>

#include <cmath>

namespace pstrain::metrics {

std::string jsonQuote(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) out += fmt::format("\\u{:04x}", c);
        else out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

void JsonObject::key(const std::string& name) {
  if (!body_.empty()) body_ += ",";
  body_ += jsonQuote(name) + ":";
}

JsonObject& JsonObject::add(const std::string& name, const std::string& value) {
  key(name);
  body_ += jsonQuote(value);
  return *this;
}

JsonObject& JsonObject::add(const std::string& name, double value) {
  key(name);
  body_ += std::isfinite(value) ? fmt::format("{:.9g}", value) : "null";
  return *this;
}

JsonObject& JsonObject::add(const std::string& name, std::int64_t value) {
  key(name);
  body_ += std::to_string(value);
  return *this;
}

JsonObject& JsonObject::add(const std::string& name, bool value) {
  key(name);
  body_ += value ? "true" : "false";
  return *this;
}

JsonObject& JsonObject::addRaw(const std::string& name, const std::string& json) {
  key(name);
  body_ += json;
  return *this;
}

}  // namespace pstrain::metrics
