#include "runtime/metrics/Startup.h"

#include <unistd.h>

#include <cstdlib>
#include <optional>

#include "runtime/Portable.h"
#include "runtime/metrics/Clock.h"
#include "runtime/metrics/Json.h"

namespace pstrain::metrics {

Startup& Startup::process() {
  static Startup startup;
  return startup;
}

Startup::Startup() : last_(steadySeconds()) {
  const double now = portable::startClockSeconds();
  const auto self = portable::processStartSeconds(::getpid());
  if (!self || *self > now) return;
  // Under mpirun only: otherwise the parent is a shell that started long before.
  const auto parent = std::getenv("OMPI_COMM_WORLD_SIZE") ? portable::processStartSeconds(::getppid()) : std::nullopt;
  if (parent && *parent <= *self) phases_.emplace_back("launch", *self - *parent);
  phases_.emplace_back("load", now - *self);
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
