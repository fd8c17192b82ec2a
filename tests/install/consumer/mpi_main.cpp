// Links tessera::tessera_mpi from the installed package: an MPI group of this one process (MPI's
// singleton start, no mpirun) averages a tensor; the data-parallel header compiles from the install.
#include <tessera/tessera.h>

#include <cstdio>

#include "core/distributed/data_parallel.h"
#include "core/distributed/mpi_group.h"

int main() {
  using namespace tessera;
  auto group = dist::mpi_process_group();
  Tensor t = tensor({1, 2, 3}, {3});
  group->all_reduce(t, dist::ReduceOp::average);
  const std::vector<float> v = t.to_vector<float>();
  const bool ok = group->size() == 1 && v[0] == 1 && v[1] == 2 && v[2] == 3;
  std::printf("tessera_mpi: rank %d of %d, %s\n", group->rank(), group->size(), ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
