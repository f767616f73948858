// Public header. Where this process sits in a distributed job, read from the environment.
//
// nabla-run and torchrun set RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT, and those win over everything below. Under torchrun (TORCHELASTIC_RUN_ID set) the
// agent's own store holds MASTER_PORT, and under nabla-run (NABLA_RUN too) the launchers' store
// does, so nabla's store takes MASTER_PORT + 1. Under `srun` (Slurm),
// SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, the step's task count (SLURM_STEP_NUM_TASKS, else SLURM_NTASKS)
// and tasks per node (SLURM_STEP_TASKS_PER_NODE, else SLURM_TASKS_PER_NODE, "2(x3),1" form) give the ranks;
// the master is the first host of SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST) unless MASTER_ADDR is set,
// and the port is MASTER_PORT, else 20000 + SLURM_JOB_ID % 10000, so the jobs sharing a node rarely collide.
// A Slurm batch script's own shell (no SLURM_STEP_* variables) is one process: start the ranks with srun.
// Under mpirun, Open MPI's OMPI_COMM_WORLD_* and MPICH/Hydra's PMI_* variables give the ranks
// (MASTER_ADDR/MASTER_PORT must then be exported to every rank).
#pragma once

#include <string>
#include <vector>

namespace nabla::distributed {

struct DistributedEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // "torchrun" (the variables by hand), "nabla-run", "torchelastic" (torchrun itself), "slurm",
  // "openmpi", "mpich" or "none" (one process).
  std::string source = "none";

  bool is_distributed() const { return world_size > 1; }
};

// Reads the variables above; a malformed or inconsistent value is a clear error naming it.
DistributedEnv distributed_env();

// Slurm's compressed host list, expanded in order: "gpu[01-04,07],login1" is gpu01, gpu02, gpu03,
// gpu04, gpu07 and login1. A range keeps its first number's zero padding ("[08-11]": 08 09 10 11),
// several bracket groups multiply ("r[1-2]n[1-2]": r1n1 r1n2 r2n1 r2n2). Malformed lists are a
// clear error naming the list.
std::vector<std::string> parse_slurm_hostlist(const std::string& list);

// Slurm's tasks per node, "2(x3),1" -> {2, 2, 2, 1}.
std::vector<int> parse_slurm_tasks_per_node(const std::string& spec);

}  // namespace nabla::distributed
