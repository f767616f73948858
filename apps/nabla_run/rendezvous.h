// The launchers' rendezvous: how the nabla-run of every node agrees on a round, sees another
// node's failure, and notices a node that has gone (Note [Elastic rounds]).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher.h"

namespace nabla::distributed {
class TcpStore;
}

namespace nabla::apps {

// Note [Elastic rounds]: node 0's nabla-run hosts a store on --master-port, and every node's
// nabla-run is its client (the ranks' own store is on the next port, as under torchrun). A job
// runs in rounds. In round r each node sets round/r/node/<k>, adds one to round/r/joined and
// waits, up to --rdzv-timeout, for the count to reach --nnodes; then it starts its ranks. While they run,
// each node adds to its heartbeat counter and reads round/r/failed every --monitor-interval. The first node
// whose rank fails (or that finds a node's heartbeat stalled) increments round/r/failed and writes what
// happened under round/r/failure; every node sees it within one interval, stops its ranks and, while restarts
// are left, joins round r + 1. Keys carry the round, so nothing of an old round can be mistaken for the new
// one, and the ranks learn theirs from TORCHELASTIC_RESTART_COUNT. A node whose ranks all succeeded sets
// round/r/done/<k>, adds to round/r/done and waits for the others (settle): the round succeeded only if every
// node's did, and a node whose ranks finished first still restarts with the rest when another node's failed.
// A node that ends the job otherwise (a signal, a timeout, no restarts left) sets `stopped`, which
// every node reads with the failure count and which no round restarts. At the end each node adds
// to `left`, and node 0, which hosts the store, stays until every node has left or gone.
//
// Every store call but the first connection is answered within a few monitor intervals or
// fails, so a node whose store host went silent finds out instead of waiting for minutes.
class Rendezvous {
 public:
  using Clock = std::chrono::steady_clock;

  // Node 0 starts the store; the others connect to it, waiting up to --rdzv-timeout, or until
  // `interrupted()` (a stop signal). Throws nabla::Error naming what failed.
  Rendezvous(const LaunchOptions& options, bool (*interrupted)());
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  // Joins `round` and returns once every node has; throws nabla::Error naming the nodes that did
  // not join within --rdzv-timeout, or saying that the job was stopped. Round 0 first checks
  // that this node runs the same --nproc-per-node and --max-restarts as node 0.
  void join(int round);

  // What another node reported for the current round, if anything.
  struct Failure {
    std::string what;    // "rank 3 (node 1, local rank 1) exited with code 1"
    bool final = false;  // no restart: the job is being stopped (a signal), not failing
  };
  // Called about every --monitor-interval while the ranks run: sends this node's heartbeat and
  // returns a failure reported by another node, or one it found (a node whose heartbeat has
  // stalled for three intervals). Store errors propagate.
  std::optional<Failure> poll();
  // Tells every node that this round failed; the first report's words are the ones kept.
  // `final`: the job ends (sets `stopped`).
  void report_failure(const std::string& what, bool final);
  // This node's ranks all succeeded: waits until every node's have (nullopt), or returns the
  // round's failure (reported by another node, a stalled node, or a stop signal here).
  std::optional<Failure> settle();
  // The job is over for this node. Node 0 waits until every other node has left or gone, so that
  // none loses the store while it still needs it.
  void leave();

  const std::string& describe_store() const { return where_; }

 private:
  std::string key(const std::string& suffix) const;
  std::string node_key(const std::string& suffix, int node) const;
  void beat();
  void observe_heartbeats(bool reset);
  // Node 0 only: reports the first stalled node as this round's failure and returns it.
  std::optional<Failure> check_stalled();
  std::optional<Failure> reported_failure();

  const LaunchOptions& o_;
  bool (*interrupted_)();
  std::unique_ptr<distributed::TcpStore> store_;
  std::string where_;  // "127.0.0.1:29500"
  int round_ = -1;
  Clock::duration interval_, stall_;
  Clock::time_point next_beat_;
  // Per node: the last heartbeat count seen and when it last changed.
  std::vector<int64_t> beats_;
  std::vector<Clock::time_point> beat_changed_;
};

}  // namespace nabla::apps
