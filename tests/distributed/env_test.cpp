// distributed_env(): torchrun/nabla-run, Slurm (srun), Open MPI and MPICH variables, Slurm's host
// lists and task counts, and clear errors.
#include <gtest/gtest.h>

#include <cstdlib>

#include "nabla/distributed/env.h"
#include "test_util.h"

namespace nabla::distributed {
namespace {

// Sets variables for one test and removes every rank variable afterwards.
class EnvTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* v : {"RANK",
                          "WORLD_SIZE",
                          "LOCAL_RANK",
                          "LOCAL_WORLD_SIZE",
                          "MASTER_ADDR",
                          "MASTER_PORT",
                          "OMPI_COMM_WORLD_RANK",
                          "OMPI_COMM_WORLD_SIZE",
                          "OMPI_COMM_WORLD_LOCAL_RANK",
                          "OMPI_COMM_WORLD_LOCAL_SIZE",
                          "PMI_RANK",
                          "PMI_SIZE",
                          "MPI_LOCALRANKID",
                          "MPI_LOCALNRANKS",
                          "SLURM_PROCID",
                          "SLURM_LOCALID",
                          "SLURM_NODEID",
                          "SLURM_NTASKS",
                          "SLURM_STEP_NUM_TASKS",
                          "SLURM_TASKS_PER_NODE",
                          "SLURM_STEP_TASKS_PER_NODE",
                          "SLURM_JOB_NODELIST",
                          "SLURM_STEP_NODELIST",
                          "SLURM_NODELIST",
                          "SLURM_JOB_ID",
                          "TORCHELASTIC_RUN_ID",
                          "NABLA_RUN"})
      ::unsetenv(v);
  }
  void set(const char* k, const char* v) { ::setenv(k, v, 1); }
};

TEST_F(EnvTest, NoVariablesIsOneProcess) {
  TearDown();
  auto env = distributed_env();
  EXPECT_EQ(env.world_size, 1);
  EXPECT_FALSE(env.is_distributed());
  EXPECT_EQ(env.source, "none");
}

TEST_F(EnvTest, TorchrunVariables) {
  set("RANK", "5");
  set("WORLD_SIZE", "8");
  set("LOCAL_RANK", "1");
  set("LOCAL_WORLD_SIZE", "4");
  set("MASTER_ADDR", "node0");
  set("MASTER_PORT", "1234");
  auto env = distributed_env();
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_EQ(env.master_addr, "node0");
  EXPECT_EQ(env.master_port, 1234);
  EXPECT_EQ(env.source, "torchrun");
}

TEST_F(EnvTest, UnderTorchrunTheStoreTakesThePortAfterTheAgents) {
  set("RANK", "1");
  set("WORLD_SIZE", "2");
  set("MASTER_PORT", "29500");
  set("TORCHELASTIC_RUN_ID", "none");
  auto env = distributed_env();
  EXPECT_EQ(env.source, "torchelastic");
  EXPECT_EQ(env.master_port, 29501);
  set("MASTER_PORT", "65535");
  EXPECT_NABLA_ERROR(distributed_env(), "MASTER_PORT=65535", "the port after it");
  // nabla-run's launchers hold MASTER_PORT the same way, and say so.
  set("MASTER_PORT", "29500");
  set("NABLA_RUN", "1");
  env = distributed_env();
  EXPECT_EQ(env.source, "nabla-run");
  EXPECT_EQ(env.master_port, 29501);
}

TEST_F(EnvTest, OpenMpiAndMpichVariables) {
  set("OMPI_COMM_WORLD_RANK", "3");
  set("OMPI_COMM_WORLD_SIZE", "4");
  set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  auto env = distributed_env();
  EXPECT_EQ(env.source, "openmpi");
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.local_rank, 1);
  TearDown();
  set("PMI_RANK", "2");
  set("PMI_SIZE", "6");
  set("MPI_LOCALRANKID", "0");
  set("MPI_LOCALNRANKS", "3");
  env = distributed_env();
  EXPECT_EQ(env.source, "mpich");
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.world_size, 6);
}

TEST_F(EnvTest, BadValuesAreClearErrors) {
  set("RANK", "two");
  EXPECT_NABLA_ERROR(distributed_env(), "RANK='two'", "integer");
  set("RANK", "4");
  set("WORLD_SIZE", "4");
  EXPECT_NABLA_ERROR(distributed_env(), "rank 4", "world size 4");
  set("RANK", "0");
  set("MASTER_PORT", "70000");
  EXPECT_NABLA_ERROR(distributed_env(), "MASTER_PORT", "65535");
}

TEST(SlurmHostList, ExpandsRangesPaddingAndSeveralGroups) {
  using V = std::vector<std::string>;
  EXPECT_EQ(parse_slurm_hostlist("gpu[01-04,07],login1"),
            (V{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "login1"}));
  EXPECT_EQ(parse_slurm_hostlist("node1"), V{"node1"});
  EXPECT_EQ(parse_slurm_hostlist("n[008-011]"), (V{"n008", "n009", "n010", "n011"}));
  EXPECT_EQ(parse_slurm_hostlist("x[9-11]"), (V{"x9", "x10", "x11"}));
  EXPECT_EQ(parse_slurm_hostlist("r[1-2]n[01-02]"), (V{"r1n01", "r1n02", "r2n01", "r2n02"}));
  EXPECT_EQ(parse_slurm_hostlist("a[1,3],b[2-3]-ib,c"), (V{"a1", "a3", "b2-ib", "b3-ib", "c"}));
  EXPECT_EQ(parse_slurm_hostlist("127.0.0.1,localhost"), (V{"127.0.0.1", "localhost"}));
  for (const char* bad : {"", "gpu[01-", "gpu]1", "gpu[4-2]", "gpu[a-b]", "gpu[]", "a,,b", "g[1-2[3]]"})
    EXPECT_NABLA_ERROR(parse_slurm_hostlist(bad), "Slurm host list");
}

TEST(SlurmHostList, TasksPerNode) {
  EXPECT_EQ(parse_slurm_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(parse_slurm_tasks_per_node("8"), std::vector<int>{8});
  for (const char* bad : {"", "2(x", "2(3)", "x2", "2,,1"})
    EXPECT_NABLA_ERROR(parse_slurm_tasks_per_node(bad), "Slurm tasks per node");
}

// As srun sets them for rank 3 of 2 nodes x 2 tasks.
void set_slurm_rank3() {
  for (auto [k, v] :
       {std::pair{"SLURM_PROCID", "3"}, std::pair{"SLURM_LOCALID", "1"}, std::pair{"SLURM_NODEID", "1"},
        std::pair{"SLURM_NTASKS", "4"}, std::pair{"SLURM_STEP_NUM_TASKS", "4"},
        std::pair{"SLURM_TASKS_PER_NODE", "2(x2)"}, std::pair{"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
        std::pair{"SLURM_JOB_NODELIST", "gpu[07-08]"}, std::pair{"SLURM_STEP_NODELIST", "gpu[07-08]"},
        std::pair{"SLURM_JOB_ID", "123456"}})
    ::setenv(k, v, 1);
}

TEST_F(EnvTest, SlurmVariables) {
  set_slurm_rank3();
  auto env = distributed_env();
  EXPECT_EQ(env.source, "slurm");
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.master_addr, "gpu07");
  EXPECT_EQ(env.master_port, 20000 + 123456 % 10000);
  // MASTER_ADDR and MASTER_PORT, when exported, win.
  set("MASTER_ADDR", "head");
  set("MASTER_PORT", "29400");
  env = distributed_env();
  EXPECT_EQ(env.master_addr, "head");
  EXPECT_EQ(env.master_port, 29400);
}

TEST_F(EnvTest, TorchrunVariablesWinOverSlurms) {
  set_slurm_rank3();
  set("RANK", "1");
  set("WORLD_SIZE", "2");
  auto env = distributed_env();
  EXPECT_EQ(env.source, "torchrun");
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.world_size, 2);
}

TEST_F(EnvTest, ABatchScriptsShellIsOneProcess) {
  // sbatch's shell has SLURM_PROCID=0 and the allocation's SLURM_NTASKS, but no step: the ranks
  // are the ones srun starts, not this shell.
  set("SLURM_PROCID", "0");
  set("SLURM_NTASKS", "4");
  set("SLURM_TASKS_PER_NODE", "2(x2)");
  set("SLURM_JOB_NODELIST", "gpu[07-08]");
  auto env = distributed_env();
  EXPECT_EQ(env.source, "none");
  EXPECT_FALSE(env.is_distributed());
}

TEST_F(EnvTest, BadSlurmValuesAreClearErrors) {
  set_slurm_rank3();
  set("SLURM_NODEID", "2");
  EXPECT_NABLA_ERROR(distributed_env(), "SLURM_NODEID=2", "lists 2 nodes");
  set("SLURM_NODEID", "1");
  set("SLURM_STEP_NODELIST", "gpu[07-");
  EXPECT_NABLA_ERROR(distributed_env(), "Slurm host list 'gpu[07-'");
}

}  // namespace
}  // namespace nabla::distributed
