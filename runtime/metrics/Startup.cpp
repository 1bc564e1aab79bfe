#include "runtime/metrics/Startup.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <optional>
#include <sstream>

#include "runtime/metrics/Json.h"

namespace pstrain::metrics {
namespace {

double steadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#ifdef __linux__
// Seconds since boot at which process `pid` started (field 22 of /proc/PID/stat, in clock
// ticks: 10 ms resolution), if it can be read.
std::optional<double> startedSinceBoot(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  for (int index = 3; index <= 22 && fields >> field; ++index) {
    if (index == 22) return std::strtod(field.c_str(), nullptr) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  }
  return std::nullopt;
}

double bootSeconds() {
  timespec now{};
  ::clock_gettime(CLOCK_BOOTTIME, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}
#endif

}  // namespace

Startup& Startup::process() {
  static Startup startup;
  return startup;
}

Startup::Startup() : last_(steadySeconds()) {
#ifdef __linux__
  const double now = bootSeconds();
  const auto self = startedSinceBoot(::getpid());
  if (!self || *self > now) return;
  // Under mpirun only: otherwise the parent is a shell that started long before.
  const auto parent = std::getenv("OMPI_COMM_WORLD_SIZE") ? startedSinceBoot(::getppid()) : std::nullopt;
  if (parent && *parent <= *self) phases_.emplace_back("launch", *self - *parent);
  phases_.emplace_back("load", now - *self);
#endif
}

void Startup::mark(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  const double now = steadySeconds();
  phases_.emplace_back(name, now - last_);
  last_ = now;
}

void Startup::firstStepDone() {
  std::function<void()> hook;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (firstStepDone_) return;
    firstStepDone_ = true;
    hook = std::move(afterFirstStep_);
  }
  mark("first_step");
  if (hook) hook();
}

void Startup::afterFirstStep(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (hook) firstStepDone_ = false;  // a new run (the multi-rank tests run many per process)
  afterFirstStep_ = std::move(hook);
}

std::vector<std::pair<std::string, double>> Startup::phases() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return phases_;
}

std::string Startup::json() const {
  JsonObject out;
  double total = 0;
  for (const auto& [name, seconds] : phases()) {
    out.add(name, seconds);
    total += seconds;
  }
  return out.add("total", total).str();
}

}  // namespace pstrain::metrics
