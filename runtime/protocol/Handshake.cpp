#include "runtime/protocol/Handshake.h"

#include <fmt/format.h>

#include <sstream>

#include "runtime/Errors.h"

namespace pstrain::protocol {

std::string encodeFacts(const Facts& facts) {
  std::string encoded;
  for (const auto& [key, value] : facts) encoded += key + "=" + value + "\n";
  return encoded;
}

std::map<std::string, std::string> decodeFacts(const std::string& encoded, int rank) {
  std::map<std::string, std::string> facts;
  std::istringstream lines(encoded);
  std::string line;
  while (std::getline(lines, line)) {
    auto eq = line.find('=');
    if (eq == std::string::npos) {
      throw CommError(fmt::format("rank {} sent a malformed start-up fact (a different pstrain version?)", rank));
    }
    facts[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return facts;
}

std::vector<std::map<std::string, std::string>> handshake(comm::Communicator& comm,
                                                          const Facts& mine) {
  std::vector<std::string> all = comm.allGather(encodeFacts(mine), "start-up handshake");
  std::vector<std::map<std::string, std::string>> facts;
  for (std::size_t r = 0; r < all.size(); ++r) facts.push_back(decodeFacts(all[r], static_cast<int>(r)));
  // Compare in the order this rank states its facts, so every rank reports the same field.
  for (const auto& [key, ignored] : mine) {
    if (key.rfind("info.", 0) == 0) continue;
    int first = -1;
    for (std::size_t r = 0; r < facts.size(); ++r) {
      auto it = facts[r].find(key);
      const std::string value = it == facts[r].end() ? "(missing)" : it->second;
      if (value.empty()) continue;
      if (first < 0) {
        first = static_cast<int>(r);
        continue;
      }
      const std::string& reference = facts[first][key];
      if (value != reference) {
        // What each rank says it is of (its "info." fact, a file's path), when it says so.
        const std::string infoKey = "info." + key;  // (a structured binding is not captured before C++20)
        auto about = [&](std::size_t rank) {
          auto info = facts[rank].find(infoKey);
          return info == facts[rank].end() ? std::string() : " (" + info->second + ")";
        };
        throw CollectiveConfigError(fmt::format(
            "ranks disagree on '{}': '{}'{} on rank {} but '{}'{} on rank {}; start every rank with "
            "the same flags, binary and data",
            key, reference, about(first), first, value, about(r), r));
      }
    }
  }
  return facts;
}

}  // namespace pstrain::protocol
