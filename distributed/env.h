// Public header. Where this process sits in a distributed job, read from the environment.
//
// nabla-run and torchrun set RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT. Under mpirun, Open MPI's OMPI_COMM_WORLD_* and MPICH/Hydra's PMI_* variables
// give the ranks instead (MASTER_ADDR/MASTER_PORT must then be exported to every rank).
#pragma once

#include <string>

namespace nabla::distributed {

struct DistributedEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "none";  // "torchrun", "openmpi", "mpich" or "none" (a single process)

  bool is_distributed() const { return world_size > 1; }
};

// Reads the variables above; a malformed or inconsistent value is a clear error naming it.
DistributedEnv distributed_env();

}  // namespace nabla::distributed
