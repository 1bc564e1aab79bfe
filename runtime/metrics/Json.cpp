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
  numbers_.emplace_back(name, value);
  return *this;
}

JsonObject& JsonObject::add(const std::string& name, std::int64_t value) {
  key(name);
  body_ += std::to_string(value);
  numbers_.emplace_back(name, static_cast<double>(value));
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

std::string jsonRawArray(const std::vector<std::string>& items) {
  std::string out = "[";
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? "," : "") + items[i];
  return out + "]";
}

std::string jsonArray(const std::vector<double>& values) {
  std::vector<std::string> items;
  for (double v : values) items.push_back(std::isfinite(v) ? fmt::format("{:.9g}", v) : "null");
  return jsonRawArray(items);
}

std::string jsonArray(const std::vector<int>& values) {
  std::vector<std::string> items;
  for (int v : values) items.push_back(std::to_string(v));
  return jsonRawArray(items);
}

std::string jsonArray(const std::vector<std::string>& values) {
  std::vector<std::string> items;
  for (const auto& v : values) items.push_back(jsonQuote(v));
  return jsonRawArray(items);
}

}  // namespace pstrain::metrics
