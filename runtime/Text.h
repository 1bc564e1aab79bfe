#pragma once
// Small text helpers shared by the command-line, config-file and host-list parsers.
#include <string>

namespace pstrain {

// `text` without leading and trailing blanks (spaces, tabs, carriage returns).
inline std::string trim(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t\r") - first + 1);
}

}  // namespace pstrain
