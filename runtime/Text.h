#pragma once
// Small text helpers shared by the command-line, config-file and host-list parsers, and by
// the lines that name ranks.
#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace pstrain {

// `text` without leading and trailing blanks (spaces, tabs, carriage returns).
inline std::string trim(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t\r") - first + 1);
}

// `text` in lower case (ASCII letters only: zip record names, which libtorch looks up so).
inline std::string lowerCase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) {
    return static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  });
  return text;
}

// Whether `text` ends with `suffix` (a file name's extension).
inline bool endsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// `text` safe to print on a terminal: control bytes (an escape sequence's ESC among them)
// and DEL as \xNN, so that text from another program (a discovery script) cannot move the
// cursor, recolour or retitle the terminal it is shown on.
inline std::string printable(const std::string& text) {
  static const char* const kHex = "0123456789abcdef";
  std::string out;
  for (const unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// The distinct strings of `values` in the order they first appear, each with the indices
// that hold it (ranks' verdicts or facts, grouped to name the ranks that share one).
inline std::vector<std::pair<std::string, std::vector<std::size_t>>> groupIndices(const std::vector<std::string>& values) {
  std::vector<std::pair<std::string, std::vector<std::size_t>>> groups;
  for (std::size_t i = 0; i < values.size(); ++i) {
    auto group = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == values[i]; });
    if (group == groups.end()) group = groups.insert(groups.end(), {values[i], {}});
    group->second.push_back(i);
  }
  return groups;
}

}  // namespace pstrain
