// `--nproc-per-node N` for nabla-train and nabla-bench: the program re-executes itself through
// nabla-run (found next to the binary, else on PATH) with the same arguments minus that flag;
// nabla-run then starts N ranks with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT set.
#pragma once

namespace nabla::train_support {

// Does not return: execs nabla-run, or throws nabla::Error naming the launcher it tried.
[[noreturn]] void relaunch_under_nabla_run(int nproc_per_node, int argc, char** argv);

}  // namespace nabla::train_support
