#include "launcher/elastic/Hosts.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <regex>
#include <sstream>

#include "runtime/Errors.h"
#include "runtime/Text.h"

namespace pstrain::launcher {
namespace {

// A slot count of 0..kMostSlots, else ConfigError naming `where`.
int parseSlots(const std::string& text, const std::string& where) {
  const bool digits = !text.empty() && text.size() <= 6 && text.find_first_not_of("0123456789") == std::string::npos;
  const int slots = digits ? std::stoi(text) : -1;
  if (slots < 0 || slots > kMostSlots) {
    throw ConfigError(fmt::format("{}: the slots '{}' are not a number from 0 to {}", where, printable(text), kMostSlots));
  }
  return slots;
}

// Host names go on mpirun's command line and into its hostfile: letters, digits, '.', '_'
// and '-', not starting with '-' (which mpirun would read as a flag).
void checkHostName(const std::string& name, const std::string& where) {
  if (name.empty() || name.size() > 253 || name[0] == '-' ||
      name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") != std::string::npos) {
    throw ConfigError(fmt::format("{}: '{}' is not a host name (letters, digits, '.', '_', '-'; no leading '-')",
                                  where, printable(name)));
  }
}

// Each host once: a second line for it (mpirun would fail on it, and pstrain-run retry) is
// a ConfigError naming both lines. `lineOfHost`: the hosts seen so far, by their line.
void requireOnce(std::map<std::string, int>& lineOfHost, const std::string& name, int number, const std::string& where) {
  const auto [earlier, first] = lineOfHost.emplace(name, number);
  if (!first) {
    throw ConfigError(fmt::format("{}: '{}' again (line {} names it too): list each host once, with all its slots",
                                  where, name, earlier->second));
  }
}

}  // namespace

std::vector<Host> parseHostList(const std::string& text) {
  std::vector<Host> hosts;
  std::map<std::string, int> lineOfHost;
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    const std::string where = fmt::format("host discovery line {}", number);
    Host h;
    const auto colon = line.rfind(':');
    h.name = trim(line.substr(0, colon));
    checkHostName(h.name, where);
    if (colon != std::string::npos) h.slots = parseSlots(trim(line.substr(colon + 1)), where);
    requireOnce(lineOfHost, h.name, number, where);
    if (h.slots > 0) hosts.push_back(h);
  }
  return hosts;
}

std::vector<Host> parseHostfile(const std::string& text) {
  std::vector<Host> hosts;
  std::map<std::string, int> lineOfHost;
  std::istringstream lines(text);
  std::string line;
  static const std::regex equals(R"(\s*=\s*)");
  for (int number = 1; std::getline(lines, line); ++number) {
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    const std::string where = fmt::format("hostfile line {}", number);
    std::istringstream words(std::regex_replace(line, equals, "="));
    Host h;
    words >> h.name;
    checkHostName(h.name, where);
    // Open MPI's keys: slots (or its old names count and cpu); max_slots and the rest are mpirun's.
    for (std::string word; words >> word;) {
      const auto eq = word.find('=');
      const std::string key = word.substr(0, eq);
      if (eq != std::string::npos && (key == "slots" || key == "count" || key == "cpu")) {
        h.slots = parseSlots(word.substr(eq + 1), where);
      }
    }
    requireOnce(lineOfHost, h.name, number, where);
    if (h.slots > 0) hosts.push_back(h);
  }
  return hosts;
}

std::string describeHosts(const std::vector<Host>& hosts) {
  std::vector<std::string> parts;
  for (const auto& h : hosts) parts.push_back(fmt::format("{}:{}", h.name, h.slots));
  return fmt::format("{}", fmt::join(parts, " "));
}

}  // namespace pstrain::launcher
