// A job started the way srun starts one: 4 processes given the variables srun sets for 2 nodes x
// 2 tasks (SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, the step's task counts and node list
// "127.0.0.[1-2]", a job id) and nothing else. Each reads its place with distributed_env(), meets
// the others through TcpStore::from_env() at the first host of the node list and the port derived
// from the job id, and an all-reduce over the Gloo group must give every rank the sum.
#if defined(NABLA_HAS_GLOO)
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "multiprocess.h"
#include "nabla/distributed/env.h"
#include "nabla/distributed/gloo/process_group_gloo.h"
#include "test_util.h"

namespace nabla::distributed {
namespace {

using testing::expect_all_succeeded;
using testing::run_ranks;

TEST(SlurmJob, FourRanksOnTwoNodesFormOneGroupFromSrunsVariables) {
  // A job id per test run: the port is 20000 + id % 10000, below the ephemeral ports others use.
  const std::string job_id = std::to_string(700000 + ::getpid() % 10000);
  auto results = run_ranks(4, [&job_id](int rank, int world, Store&) {
    for (const char* v :
         {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"})
      ::unsetenv(v);
    const std::string procid = std::to_string(rank), local = std::to_string(rank % 2),
                      node = std::to_string(rank / 2);
    for (auto [k, v] :
         {std::pair{"SLURM_PROCID", procid.c_str()}, std::pair{"SLURM_LOCALID", local.c_str()},
          std::pair{"SLURM_NODEID", node.c_str()}, std::pair{"SLURM_NTASKS", "4"},
          std::pair{"SLURM_STEP_NUM_TASKS", "4"}, std::pair{"SLURM_TASKS_PER_NODE", "2(x2)"},
          std::pair{"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}, std::pair{"SLURM_JOB_NODELIST", "127.0.0.[1-2]"},
          std::pair{"SLURM_STEP_NODELIST", "127.0.0.[1-2]"}, std::pair{"SLURM_JOB_ID", job_id.c_str()}})
      ::setenv(k, v, 1);
    const DistributedEnv env = distributed_env();
    RANK_CHECK(env.source == "slurm" && env.rank == rank && env.world_size == world &&
                   env.local_rank == rank % 2 && env.local_world_size == 2 && env.master_addr == "127.0.0.1",
               "rank {}: source {}, rank {} of {}, local {} of {}, master {}", rank, env.source, env.rank,
               env.world_size, env.local_rank, env.local_world_size, env.master_addr);
    auto store = TcpStore::from_env(
        {.timeout = std::chrono::seconds(20), .connect_timeout = std::chrono::seconds(20)});
    ProcessGroupGloo group(*store, env.rank, env.world_size, {.timeout = std::chrono::seconds(20)});
    Tensor t = full({5}, static_cast<double>(env.rank + 1), {.dtype = kFloat64});
    group.allreduce(t, ReduceOp::sum)->wait();
    const double want = world * (world + 1) / 2.0;  // 1 + 2 + 3 + 4
    RANK_CHECK(nabla::testing::all_close(t, full({5}, want, {.dtype = kFloat64}), 0.0, 0.0),
               "rank {}: the sum is wrong", rank);
  });
  expect_all_succeeded(results);
}

}  // namespace
}  // namespace nabla::distributed
#endif  // NABLA_HAS_GLOO
