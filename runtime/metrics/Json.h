#pragma once
// A one-line JSON object writer for run.json, metrics.jsonl, eval.jsonl and .ok markers.
// Keys keep insertion order; non-finite numbers become null (JSON has no NaN).
#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

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
  // The numeric fields (add(double), add(int64)), in order, as doubles: what a metrics line
  // also gives TensorBoard (EventFile).
  const std::vector<std::pair<std::string, double>>& numbers() const { return numbers_; }

 private:
  void key(const std::string& name);
  std::string body_;
  std::vector<std::pair<std::string, double>> numbers_;
};

std::string jsonQuote(const std::string& text);

// JSON arrays: of numbers (non-finite ones as null), of already-serialised values (objects),
// and {"key": count, ...} of a map's entries.
std::string jsonArray(const std::vector<double>& values);
std::string jsonArray(const std::vector<int>& values);
std::string jsonArray(const std::vector<std::string>& values);
std::string jsonRawArray(const std::vector<std::string>& items);
template <typename Key>
std::string jsonCounts(const std::map<Key, std::int64_t>& counts) {
  JsonObject object;
  for (const auto& [key, count] : counts) {
    if constexpr (std::is_same_v<Key, std::string>) object.add(key, count);
    else object.add(std::to_string(key), count);
  }
  return object.str();
}

}  // namespace pstrain::metrics
