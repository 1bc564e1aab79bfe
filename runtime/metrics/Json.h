#pragma once
// A one-line JSON object writer for run.json, metrics.jsonl, eval.jsonl and .ok markers.
// Keys keep insertion order; non-finite numbers become null (JSON has no NaN).
#include <cstdint>
#include <string>

namespace pstrain::metrics {

class JsonObject {
 public:
  JsonObject& add(const std::string& key, const std::string& value);
  JsonObject& add(const std::string& key, const char* value) { return add(key, std::string(value)); }
  JsonObject& add(const std::string& key, double value);
  JsonObject& add(const std::string& key, std::int64_t value);
  JsonObject& add(const std::string& key, int value) { return add(key, std::int64_t(value)); }
  JsonObject& add(const std::string& key, bool value);
  // Inserts already-serialised JSON (an object or array) as the value.
  JsonObject& addRaw(const std::string& key, const std::string& json);

  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(const std::string& name);
  std::string body_;
};

std::string jsonQuote(const std::string& text);

}  // namespace pstrain::metrics
