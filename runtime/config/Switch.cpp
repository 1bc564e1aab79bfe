#include "runtime/config/Switch.h"

#include <fmt/format.h>

#include "runtime/Errors.h"

namespace pstrain::config {

const char* nameOf(Switch value) { return value == Switch::On ? "on" : value == Switch::Off ? "off" : kAuto; }
const char* nameOf(OnOff value) { return value == OnOff::On ? "on" : "off"; }
const char* nameOf(MemoryUse value) {
  return value == MemoryUse::Fast ? "fast" : value == MemoryUse::Lean ? "lean" : kAuto;
}

Switch parseSwitch(const char* flag, const std::string& text) {
  for (Switch value : {Switch::Off, Switch::On, Switch::Auto}) {
    if (text == nameOf(value)) return value;
  }
  throw ConfigError(fmt::format("--{} '{}' is not one of: auto, off, on", flag, text));
}

OnOff parseOnOff(const char* flag, const std::string& text) {
  for (OnOff value : {OnOff::Off, OnOff::On}) {
    if (text == nameOf(value)) return value;
  }
  throw ConfigError(fmt::format("--{} '{}' is not one of: off, on", flag, text));
}

MemoryUse parseMemoryUse(const char* flag, const std::string& text) {
  for (MemoryUse value : {MemoryUse::Auto, MemoryUse::Fast, MemoryUse::Lean}) {
    if (text == nameOf(value)) return value;
  }
  throw ConfigError(fmt::format("--{} '{}' is not one of: auto, fast, lean", flag, text));
}

}  // namespace pstrain::config
