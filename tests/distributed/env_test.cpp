// distributed_env(): torchrun/nabla-run, Open MPI and MPICH variables, and clear errors.
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
    for (const char* v :
         {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
          "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
          "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"})
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

}  // namespace
}  // namespace nabla::distributed
