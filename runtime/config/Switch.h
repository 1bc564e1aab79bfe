#pragma once
// The values of an on | off | auto flag and of an on | off one, typed: the flag table
// (Flags.cpp) reads and writes them as that text, and code compares them as values.
// Torch-free.
#include <string>

namespace pstrain::config {

// The word of a setting the run decides (here, and in flags whose other values are numbers
// or names: --local-steps, --compress).
constexpr const char* kAuto = "auto";

enum class Switch { Off, On, Auto };
enum class OnOff { Off, On };
// --memory: what a host's ranks keep between steps. Fast keeps the buffers that speed needs
// (a worker's whole gradient buffer, its pages never given back; every part a server takes
// in flight at once); Lean gives pages back as soon as they are sent and holds a bounded
// few in flight; Auto is resolved at start-up, per host, by the memory plan
// (training::chooseMemory), into one of the two.
enum class MemoryUse { Auto, Fast, Lean };

const char* nameOf(Switch value);  // "off", "on", "auto"
const char* nameOf(OnOff value);   // "off", "on"
const char* nameOf(MemoryUse value);  // "auto", "fast", "lean"
// The value of --`flag` from its text; throws ConfigError listing the values otherwise.
Switch parseSwitch(const char* flag, const std::string& text);
OnOff parseOnOff(const char* flag, const std::string& text);
MemoryUse parseMemoryUse(const char* flag, const std::string& text);

}  // namespace pstrain::config
