#pragma once
// cxxopts values whose defaults come from a command's own struct, so that a default is
// written once (in the struct) and --help shows it.
#include <cxxopts.hpp>
#include <fmt/format.h>

#include <memory>
#include <string>
#include <type_traits>

namespace pstrain::launcher {

template <typename T>
std::shared_ptr<cxxopts::Value> defaulted(const T& value) {
  if constexpr (std::is_same_v<T, std::string>) {
    return cxxopts::value<T>()->default_value(value);
  } else if constexpr (std::is_same_v<T, double>) {
    return cxxopts::value<T>()->default_value(fmt::format("{}", value));  // shortest round trip: "900", "0.0001"
  } else {
    return cxxopts::value<T>()->default_value(std::to_string(value));
  }
}

}  // namespace pstrain::launcher
