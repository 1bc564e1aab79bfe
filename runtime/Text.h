#pragma once
// Small text helpers shared by the command-line, config-file and host-list parsers, and by
// the lines that name ranks.
#include <algorithm>
#include <cstddef>
#include <cstdint>
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

// `text` safe to print on a terminal: control bytes (an escape sequence's ESC among them),
// DEL, the C1 controls (U+0080 to U+009F: CSI among them) and bytes that are not UTF-8 as
// \xNN, so that text from another program or file (a discovery script, a forged header)
// cannot move the cursor, recolour or retitle the terminal it is shown on.
inline std::string printable(const std::string& text) {
  static const char* const kHex = "0123456789abcdef";
  std::string out;
  const auto escape = [&](unsigned char c) {
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 0xf];
  };
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f) escape(c);
      else out += static_cast<char>(c);
      ++i;
      continue;
    }
    // A UTF-8 sequence, whole and shortest, of a character past the C1 controls: as it is.
    const std::size_t length = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    std::uint32_t cp = length == 2 ? c & 0x1F : length == 3 ? c & 0x0F : c & 0x07;
    bool whole = length > 0 && i + length <= text.size();
    for (std::size_t k = 1; whole && k < length; ++k) {
      const auto b = static_cast<unsigned char>(text[i + k]);
      whole = (b & 0xC0) == 0x80;
      cp = cp << 6 | (b & 0x3F);
    }
    const std::uint32_t least = length == 2 ? 0xA0 : length == 3 ? 0x800 : 0x10000;
    if (whole && cp >= least && cp <= 0x10FFFF && !(cp >= 0xD800 && cp < 0xE000)) {
      out.append(text, i, length);
      i += length;
    } else {
      escape(c);
      ++i;
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
