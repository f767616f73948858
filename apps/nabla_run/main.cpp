// nabla-run: starts a distributed job on this node, the way torchrun does.
//
//   nabla-run --nproc-per-node 2 -- nabla-train --arch resnet50 --amp fp16
#include <CLI/CLI.hpp>

#include <cstdio>

#include "launcher.h"
#include "nabla/core/error.h"

int main(int argc, char** argv) {
  nabla::apps::LaunchOptions o;
  CLI::App app{
      "nabla-run: start one process per GPU (local rank) of a distributed nabla job.\n"
      "Each process gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT,\n"
      "as torchrun sets them. If a rank fails, the others (on every node) are stopped and the failing\n"
      "rank is reported; with --max-restarts, every rank is started again in a new rendezvous round.\n"
      "On several nodes, run nabla-run on each with the same --nnodes, --master-addr and --master-port.",
      "nabla-run"};
  app.get_formatter()->column_width(34);
  auto* job = "Job";
  app.add_option("--nproc-per-node", o.nproc_per_node, "Processes on this node (usually its number of GPUs)")
      ->group(job)
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--nnodes", o.nnodes, "Nodes in the job")
      ->group(job)
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--node-rank", o.node_rank, "This node's index, 0 .. nnodes-1")
      ->group(job)
      ->capture_default_str();
  auto* rdv = "Rendezvous (node 0 hosts it)";
  app.add_option("--master-addr", o.master_addr, "Host of node 0, reachable from every node")
      ->group(rdv)
      ->capture_default_str();
  app.add_option("--master-port", o.master_port,
                 "Free TCP port on that host for the launchers' store; the ranks' store takes the next one")
      ->group(rdv)
      ->capture_default_str()
      ->check(CLI::Range(1, 65534));
  app.add_option("--rdzv-timeout", o.rdzv_timeout, "Seconds every node has to join a rendezvous round")
      ->group(rdv)
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--monitor-interval", o.monitor_interval,
                 "Seconds between heartbeats; a node silent for 3 intervals counts as failed")
      ->group(rdv)
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  auto* behaviour = "Behaviour";
  app.add_option("--max-restarts", o.max_restarts,
                 "Times to start every rank again after a failure (resume with nabla-train --resume auto)")
      ->group(behaviour)
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  app.add_option("--grace", o.grace_seconds, "Seconds ranks get to exit after SIGTERM before SIGKILL")
      ->group(behaviour)
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  bool no_prefix = false;
  app.add_flag("--no-prefix", no_prefix, "Do not prefix output lines with [rank N]")->group(behaviour);
  app.add_option("command", o.command, "The program to run and its arguments (after --)")->required();
  app.footer(
      "Examples:\n"
      "  nabla-run --nproc-per-node 8 -- nabla-train --arch resnet50 --amp fp16\n"
      "  nabla-run --nnodes 2 --node-rank 0 --master-addr node0 --nproc-per-node 8 --max-restarts 3 \\\n"
      "      -- nabla-train --resume auto --checkpoint-dir /shared/run1   (and --node-rank 1 on node1)");
  CLI11_PARSE(app, argc, argv);
  o.prefix_output = !no_prefix;
  try {
    return nabla::apps::launch(o);
  } catch (const nabla::Error& e) {
    std::fprintf(stderr, "nabla-run: %s\n", e.what());
    return 2;
  }
}
