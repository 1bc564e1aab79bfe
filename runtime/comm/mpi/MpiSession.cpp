// MPI's start and end for the process (MpiComm.h's MpiSession).
#include <fmt/format.h>
#include <mpi.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "runtime/comm/mpi/MpiCalls.h"
#include "runtime/comm/mpi/MpiComm.h"

namespace pstrain::comm::mpi {

MpiSession::MpiSession(int* argc, char*** argv) {
  // Non-blocking reductions progress only inside MPI calls, and waitFor() sleeps between
  // them. libnbc's default for large messages is a segmented chain: one MPI_Test per
  // segment, so every segment costs a sleep (hundreds of times slower per step). A binomial
  // tree moves a buffer in a few rounds. The environment (or an mpirun --mca) still wins:
  // setenv does not overwrite.
  ::setenv("OMPI_MCA_coll_libnbc_ireduce_algorithm", "2", 0);
  // The all-reduce likewise: its default for a model-sized buffer was a binomial reduce and
  // broadcast, log N whole-buffer hops each way; Rabenseifner's (reduce-scatter, then
  // all-gather) moves about two buffers per rank in all (README, "Performance", and
  // tools/bench-scale measure it).
  ::setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", 0);
  // Between hosts (TCP), a message above btl_tcp_eager_limit (64 KiB) waits for the
  // receiver's answer and then moves in fragments, each only while both ranks are inside an
  // MPI call: with waitFor()'s sleeps every hop of a tree collective stalls for pauses. At
  // 512 KiB a gradient bucket (256 KiB, --bucket-kb) goes out at once, as one fragment
  // (README, "Performance"; tools/bench-scale). Larger limits slow the point-to-point
  // modes, whose whole-model messages then all arrive at the server's link at once.
  for (const char* name : {"OMPI_MCA_btl_tcp_eager_limit", "OMPI_MCA_btl_tcp_rndv_eager_limit",
                           "OMPI_MCA_btl_tcp_max_send_size"}) {
    ::setenv(name, "524288", 0);
  }
  yieldWhenIdle() = chooseYieldWhenIdle();
  // SERIALIZED, not FUNNELED: with --overlap on a GPU, a worker's gradient hooks start
  // reductions from autograd's device thread while the main thread waits inside backward()
  // (tests/gpu proves which thread runs them). Calls never overlap, so this level suffices.
  check(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &threadLevel()), "MPI_Init_thread");
}

// More ranks on this host than it has cores: a rank that spins in an MPI call takes the
// core of one that computes, so an MPI call that finds nothing to do must yield it (Open
// MPI's mpi_yield_when_idle). Open MPI turns that on only where a host has more ranks than
// hostfile slots, which says nothing about cores; it tells every rank its host's rank count
// before MPI_Init, so pstrain decides here. The user's own setting (environment, or
// mpirun --mca, which arrives as the same variable) wins.
std::string MpiSession::chooseYieldWhenIdle() {
  constexpr const char* kVariable = "OMPI_MCA_mpi_yield_when_idle";
  if (const char* set = std::getenv(kVariable)) return fmt::format("{} (set by the user)", set);
  const char* localSize = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const unsigned cores = std::thread::hardware_concurrency();
  const long ranks = localSize ? std::strtol(localSize, nullptr, 10) : 0;
  if (cores == 0 || ranks <= static_cast<long>(cores)) return "default";
  ::setenv(kVariable, "1", 1);
  return fmt::format("1 (set by pstrain: {} ranks on {} cores)", ranks, cores);
}

std::string& MpiSession::yieldWhenIdle() {
  static std::string choice = "default";
  return choice;
}

int& MpiSession::threadLevel() {
  static int provided = MPI_THREAD_SINGLE;
  return provided;
}

bool MpiSession::callableFromAnyThread() { return threadLevel() >= MPI_THREAD_SERIALIZED; }

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiSession::abortJob(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

std::string MpiSession::libraryVersion() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(text, &length);
  std::string version(text, length);
  auto end = version.find_first_of(",\n");
  return version.substr(0, end);
}

}  // namespace pstrain::comm::mpi
