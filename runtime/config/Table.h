#pragma once
// What every table of config/ (modes, optimizers, losses, devices) does with its rows'
// names, written once: list them, and find a row by name or say which names there are.
// A Row has a `const char* name`.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "runtime/Errors.h"

namespace pstrain::config {

// "a | b | c" (or with another separator), in the table's order.
template <typename Row>
std::string namesOf(const std::vector<Row>& rows, const char* separator = " | ") {
  std::string names;
  for (const Row& row : rows) names += (names.empty() ? "" : separator) + std::string(row.name);
  return names;
}

// The row called `name`; throws ConfigError "--FLAG 'name' is not one of: ..." otherwise.
template <typename Row>
const Row& rowNamed(const std::vector<Row>& rows, const std::string& name, const std::string& flag,
                    const char* separator = " | ") {
  for (const Row& row : rows) {
    if (name == row.name) return row;
  }
  throw ConfigError(fmt::format("--{} '{}' is not one of: {}", flag, name, namesOf(rows, separator)));
}

}  // namespace pstrain::config
