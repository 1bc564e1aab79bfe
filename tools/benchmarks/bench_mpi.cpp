// Raw MPI: one MPI_Bcast of DOWN bytes from rank 0 and one MPI_Reduce (sum) of UP bytes of
// floats to rank 0 per iteration, blocking calls, nothing else: what one sync step's
// exchange costs at MPI's own speed (tools/bench compares pstrain's exchange with it).
//   mpirun -np N bench_mpi DOWN_BYTES UP_BYTES ITERATIONS   rank 0 prints "ms_per_exchange"
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc < 4) {
    std::fprintf(stderr, "usage: bench_mpi DOWN_BYTES UP_BYTES ITERATIONS\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const long down = std::atol(argv[1]), up = std::atol(argv[2]) / 4;
  const int iterations = std::atoi(argv[3]);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::vector<char> weights(down, 1);
  std::vector<float> grads(up, 1.0f), sum(up);
  auto exchange = [&] {
    MPI_Bcast(weights.data(), static_cast<int>(down), MPI_BYTE, 0, MPI_COMM_WORLD);
    MPI_Reduce(grads.data(), sum.data(), static_cast<int>(up), MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
  };
  for (int i = 0; i < 10; ++i) exchange();
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) exchange();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (rank == 0) std::printf("%.4f\n", 1000 * seconds / iterations);
  MPI_Finalize();
  return 0;
}
