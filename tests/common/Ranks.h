#pragma once
// Ranks as threads: runs body(rank) on one thread per rank of `world`.
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/InProcessComm.h"

namespace pstrain::testsupport {

// Returns each rank's exception message ("" if none); a throwing rank aborts the world so
// the others leave their waits.
inline std::vector<std::string> runRanks(comm::InProcessWorld& world, const std::function<void(int)>& body) {
  std::vector<std::string> errors(world.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < world.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        world.abort();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace pstrain::testsupport
