#include "runtime/protocol/Handshake.h"

#include <fmt/format.h>

#include <set>
#include <sstream>

#include "runtime/Errors.h"

namespace pstrain::protocol {

namespace {

// A fact's key or value on one line: backslash and newline escaped, so that a value (a path,
// a host name) can neither end its line early nor add a fact of its own.
std::string escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string unescaped(const std::string& text, int rank) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out += text[i];
      continue;
    }
    const char next = i + 1 < text.size() ? text[++i] : '\0';
    if (next != '\\' && next != 'n') {
      throw CommError(fmt::format("rank {} sent a malformed start-up fact (a different pstrain version?)", rank));
    }
    out += next == 'n' ? '\n' : '\\';
  }
  return out;
}

}  // namespace

std::string encodeFacts(const Facts& facts) {
  std::string encoded;
  for (const auto& [key, value] : facts) encoded += escaped(key) + "=" + escaped(value) + "\n";
  return encoded;
}

namespace {

// A rank's facts in the order it states them.
Facts decodeFactList(const std::string& encoded, int rank) {
  Facts facts;
  std::istringstream lines(encoded);
  std::string line;
  while (std::getline(lines, line)) {
    auto eq = line.find('=');
    if (eq == std::string::npos) {
      throw CommError(fmt::format("rank {} sent a malformed start-up fact (a different pstrain version?)", rank));
    }
    facts.emplace_back(unescaped(line.substr(0, eq), rank), unescaped(line.substr(eq + 1), rank));
  }
  return facts;
}

}  // namespace

std::map<std::string, std::string> decodeFacts(const std::string& encoded, int rank) {
  std::map<std::string, std::string> facts;
  for (auto& [key, value] : decodeFactList(encoded, rank)) facts[key] = std::move(value);
  return facts;
}

std::vector<std::map<std::string, std::string>> handshake(comm::Communicator& comm,
                                                          const Facts& mine) {
  std::vector<std::string> all = comm.allGather(encodeFacts(mine), "start-up handshake");
  std::vector<std::map<std::string, std::string>> facts;
  // Every rank's keys in the order the ranks state them, rank 0's first: the same sequence on
  // every rank, so that every rank reports the same field.
  std::vector<std::string> keys;
  std::set<std::string> seen;
  for (std::size_t r = 0; r < all.size(); ++r) {
    const Facts list = decodeFactList(all[r], static_cast<int>(r));
    for (const auto& [key, value] : list) {
      if (seen.insert(key).second) keys.push_back(key);
    }
    facts.push_back(decodeFacts(all[r], static_cast<int>(r)));
  }
  for (const std::string& key : keys) {
    if (key.rfind("info.", 0) == 0) continue;
    int first = -1;
    for (std::size_t r = 0; r < facts.size(); ++r) {
      const auto it = facts[r].find(key);
      if (it == facts[r].end()) continue;  // not a fact of this rank's (a server's data set)
      if (first < 0) {
        first = static_cast<int>(r);
        continue;
      }
      const std::string& reference = facts[first][key];
      const std::string& value = it->second;
      if (value != reference) {
        // What each rank says it is of (its "info." fact, a file's path), when it says so.
        const std::string infoKey = "info." + key;  // (a structured binding is not captured before C++20)
        auto about = [&](std::size_t rank) {
          auto info = facts[rank].find(infoKey);
          return info == facts[rank].end() || info->second.empty() ? std::string() : " (" + info->second + ")";
        };
        const auto said = [](const std::string& v) { return v.empty() ? std::string("nothing") : "'" + v + "'"; };
        throw CollectiveConfigError(fmt::format(
            "ranks disagree on '{}': {}{} on rank {} but {}{} on rank {}; start every rank with "
            "the same flags, binary and data",
            key, said(reference), about(static_cast<std::size_t>(first)), first, said(value), about(r), r));
      }
    }
  }
  return facts;
}

}  // namespace pstrain::protocol
