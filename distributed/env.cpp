#include "nabla/distributed/env.h"

#include <cstdlib>

#include "nabla/core/error.h"

namespace nabla::distributed {
namespace {

bool has(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

int read_int(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  long parsed = std::strtol(v, &end, 10);
  NABLA_CHECK(*end == '\0' && parsed >= lo && parsed <= hi,
              "environment variable {}='{}' must be an integer in [{}, {}]", name, v, lo, hi);
  return static_cast<int>(parsed);
}

}  // namespace

DistributedEnv distributed_env() {
  DistributedEnv env;
  constexpr int kMax = 1 << 20;
  if (has("RANK") || has("WORLD_SIZE")) {
    env.source = "torchrun";
    env.rank = read_int("RANK", 0, 0, kMax);
    env.world_size = read_int("WORLD_SIZE", 1, 1, kMax);
    env.local_rank = read_int("LOCAL_RANK", env.rank, 0, kMax);
    env.local_world_size = read_int("LOCAL_WORLD_SIZE", env.world_size, 1, kMax);
  } else if (has("OMPI_COMM_WORLD_RANK")) {
    env.source = "openmpi";
    env.rank = read_int("OMPI_COMM_WORLD_RANK", 0, 0, kMax);
    env.world_size = read_int("OMPI_COMM_WORLD_SIZE", 1, 1, kMax);
    env.local_rank = read_int("OMPI_COMM_WORLD_LOCAL_RANK", 0, 0, kMax);
    env.local_world_size = read_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1, 1, kMax);
  } else if (has("PMI_RANK")) {
    env.source = "mpich";
    env.rank = read_int("PMI_RANK", 0, 0, kMax);
    env.world_size = read_int("PMI_SIZE", 1, 1, kMax);
    env.local_rank = read_int("MPI_LOCALRANKID", 0, 0, kMax);
    env.local_world_size = read_int("MPI_LOCALNRANKS", 1, 1, kMax);
  }
  if (has("MASTER_ADDR")) env.master_addr = std::getenv("MASTER_ADDR");
  env.master_port = read_int("MASTER_PORT", env.master_port, 1, 65535);
  NABLA_CHECK(env.rank < env.world_size, "rank {} (from {}) must be below the world size {}", env.rank,
              env.source, env.world_size);
  NABLA_CHECK(env.local_rank < env.local_world_size,
              "local rank {} (from {}) must be below the local world size {}", env.local_rank, env.source,
              env.local_world_size);
  return env;
}

}  // namespace nabla::distributed
