#pragma once
// pstrain --doctor: a preflight of every host of a job, under the job's own mpirun, that
// trains nothing. Every rank states what it has (its pstrain build, libtorch, BLAS, device,
// clock, and a sample of every data and model file it would read: size and a CRC-32 of the
// first and last MiB), rank 0 times a round trip to each rank over MPI's transport and checks
// its train dir (writable, room for 3 checkpoints), then compares. Each problem is one line
// naming the rank and host and the fix; the exit status is 0 when all is well, 2 when not,
// and a rank that does not answer within --timeout ends the check with 2, naming the phase.
#include "runtime/comm/mpi/MpiComm.h"
#include "runtime/config/TrainConfig.h"

namespace pstrain::launcher {

// Collective over every rank of `comm`; returns the exit status, the same on every rank.
int runDoctor(comm::mpi::MpiComm& comm, const config::TrainConfig& cfg);

}  // namespace pstrain::launcher
