// The launcher behind `nabla-run`: starts one process per local rank with the environment
// torchrun sets, forwards their output with a rank prefix, stops everyone when one rank fails
// and says which rank and why, and forwards SIGINT/SIGTERM. With --max-restarts it starts every
// rank of every node again after a failure, in a new rendezvous round (rendezvous.h).
#pragma once

#include <string>
#include <vector>

namespace nabla::apps {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  double grace_seconds = 10;    // how long ranks get to exit after SIGTERM before SIGKILL
  int max_restarts = 0;         // rounds started again after a failure, as torchrun's option
  double monitor_interval = 5;  // seconds between heartbeats and checks of the other nodes
  double rdzv_timeout = 300;    // seconds every node has to join a round
  bool prefix_output = true;    // "[rank N] " before each line of a rank's output
  std::vector<std::string> command;
};

// Runs the job and returns the exit code nabla-run should exit with: 0 when every rank exited 0,
// otherwise the first failing rank's code (128 + signal for a rank killed by a signal), or 1
// when the failure was another node's.
int launch(const LaunchOptions& options);

}  // namespace nabla::apps
