#include "rendezvous.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "nabla/core/error.h"
#include "nabla/distributed/tcp_store.h"

namespace nabla::apps {
namespace {

using std::chrono::duration;
using std::chrono::duration_cast;

Rendezvous::Clock::duration seconds(double s) {
  return duration_cast<Rendezvous::Clock::duration>(duration<double>(s));
}

double seconds_since(Rendezvous::Clock::time_point t) {
  return duration<double>(Rendezvous::Clock::now() - t).count();
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

// A node's heartbeat may lag by one interval and a store round trip; three missed intervals
// mean it is gone (its launcher killed, its host down or cut off).
constexpr int kMissedBeats = 3;

}  // namespace

Rendezvous::Rendezvous(const LaunchOptions& o, bool (*interrupted)())
    : o_(o),
      interrupted_(interrupted),
      where_(fmt::format("{}:{}", o.master_addr, o.master_port)),
      interval_(seconds(o.monitor_interval)),
      stall_(seconds(o.monitor_interval * kMissedBeats)),
      beats_(static_cast<size_t>(o.nnodes), -1),
      beat_changed_(static_cast<size_t>(o.nnodes), Clock::now()) {
  // Each request (and each connection attempt) gets a few intervals: node 0 may start later than
  // the others, so they try again until --rdzv-timeout, or a signal.
  const auto request = duration_cast<std::chrono::milliseconds>(std::max(stall_, seconds(2.0)));
  const auto deadline = Clock::now() + seconds(o.rdzv_timeout);
  for (;;) {
    try {
      store_ = std::make_unique<distributed::TcpStore>(
          o.master_addr, static_cast<uint16_t>(o.master_port),
          distributed::TcpStoreOptions{
              .is_server = o.node_rank == 0, .timeout = request, .connect_timeout = request});
      break;
    } catch (const distributed::StoreConnectError& e) {
      NABLA_CHECK(o.node_rank != 0 && Clock::now() < deadline && !interrupted(),
                  "node {} cannot reach the launchers' store at {} (node 0's nabla-run hosts it on "
                  "--master-port){}: {}",
                  o.node_rank, where_, interrupted() ? ", and was stopped by a signal" : "", e.what());
    } catch (const Error& e) {
      throw Error(o.node_rank == 0
                      ? fmt::format("node 0 cannot start the launchers' store on --master-port {}: {}",
                                    o.master_port, e.what())
                      : e.what());
    }
  }
}

Rendezvous::~Rendezvous() = default;

std::string Rendezvous::key(const std::string& suffix) const {
  return fmt::format("round/{}/{}", round_, suffix);
}

std::string Rendezvous::node_key(const std::string& suffix, int node) const {
  return key(fmt::format("{}/{}", suffix, node));
}

void Rendezvous::join(int round) {
  round_ = round;
  if (round == 0) {
    // Every node must start as many ranks, and restart as often, as node 0.
    const std::string config =
        fmt::format("--nproc-per-node {} --max-restarts {}", o_.nproc_per_node, o_.max_restarts);
    if (o_.node_rank == 0) {
      store_->set("config", config);
    } else {
      const std::string node0 = store_->get_string("config");
      NABLA_CHECK(node0 == config,
                  "node {} runs with {}, but node 0 with {}; start every node's nabla-run alike",
                  o_.node_rank, config, node0);
    }
  }
  store_->set(node_key("node", o_.node_rank), host_name());
  store_->add(key("joined"), 1);
  const auto deadline = Clock::now() + seconds(o_.rdzv_timeout);
  while (store_->add(key("joined"), 0) < o_.nnodes) {
    NABLA_CHECK(!store_->check("stopped"), "the job was stopped: {}", store_->get_string("stopped"));
    NABLA_CHECK(!interrupted_(), "stopped by a signal while waiting for the other nodes to join round {}",
                round);
    if (Clock::now() > deadline) {
      std::vector<int> missing;
      for (int k = 0; k < o_.nnodes; ++k) {
        if (!store_->check(node_key("node", k))) missing.push_back(k);
      }
      throw Error(fmt::format(
          "node(s) {} did not join rendezvous round {} within --rdzv-timeout {} s (store {}); {}",
          fmt::join(missing, ", "), round, o_.rdzv_timeout, where_,
          round == 0 ? "was their nabla-run started with the same --nnodes, --master-addr and --master-port?"
                     : "they stopped, or their host went down, after the previous round failed"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  observe_heartbeats(/*reset=*/true);
  next_beat_ = Clock::now();
}

void Rendezvous::observe_heartbeats(bool reset) {
  const auto now = Clock::now();
  for (int k = 0; k < o_.nnodes; ++k) {
    if (k == o_.node_rank) continue;
    const int64_t count = store_->add(fmt::format("heartbeat/{}", k), 0);
    if (reset || count != beats_[k]) {
      beats_[k] = count;
      beat_changed_[k] = now;
    }
  }
}

void Rendezvous::beat() {
  if (Clock::now() < next_beat_) return;
  next_beat_ = Clock::now() + interval_;
  store_->add(fmt::format("heartbeat/{}", o_.node_rank), 1);
}

std::optional<Rendezvous::Failure> Rendezvous::reported_failure() {
  if (store_->check("stopped")) return Failure{store_->get_string("stopped"), true};
  if (store_->add(key("failed"), 0) == 0) return std::nullopt;
  return Failure{store_->get_string(key("failure")), false};
}

std::optional<Rendezvous::Failure> Rendezvous::check_stalled() {
  // Node 0 watches the others' heartbeats (one watcher keeps the store's load linear in nodes);
  // a node losing node 0 finds out from the store itself.
  if (o_.node_rank != 0) return std::nullopt;
  observe_heartbeats(/*reset=*/false);
  const auto now = Clock::now();
  for (int k = 1; k < o_.nnodes; ++k) {
    if (now - beat_changed_[k] <= stall_ || store_->check(node_key("done", k))) continue;
    report_failure(
        fmt::format("node {} has sent no heartbeat for {:.1f} s (3 x --monitor-interval {} s): its "
                    "nabla-run was killed, or its host went down or lost the network",
                    k, seconds_since(beat_changed_[k]), o_.monitor_interval),
        /*final=*/false);
    return reported_failure();
  }
  return std::nullopt;
}

std::optional<Rendezvous::Failure> Rendezvous::poll() {
  if (Clock::now() < next_beat_) return std::nullopt;
  beat();
  if (auto failure = reported_failure()) return failure;
  return check_stalled();
}

void Rendezvous::report_failure(const std::string& what, bool final) {
  const std::string words = fmt::format("{} (reported by node {})", what, o_.node_rank);
  if (final && !store_->check("stopped")) store_->set("stopped", words);
  // The first report's words stay; later ones only add to the count.
  if (store_->add(key("failed"), 1) == 1) store_->set(key("failure"), words);
}

std::optional<Rendezvous::Failure> Rendezvous::settle() {
  store_->set(node_key("done", o_.node_rank), "ok");
  store_->add(key("done"), 1);
  // No deadline of its own: a node that fails or goes silent ends the wait through the failure
  // count (node 0 reports the silent ones), and node 0's own end through the store.
  for (;;) {
    beat();
    if (auto failure = reported_failure()) return failure;
    if (store_->add(key("done"), 0) >= o_.nnodes) return std::nullopt;
    if (auto failure = check_stalled()) return failure;
    if (interrupted_()) {
      const std::string what = fmt::format("nabla-run on node {} was stopped by a signal", o_.node_rank);
      report_failure(what, /*final=*/true);
      return Failure{what, true};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void Rendezvous::leave() {
  const int64_t left = store_->add("left", 1);
  if (o_.node_rank != 0 || left >= o_.nnodes) return;
  // Node 0 hosts the store: it stays while another node may still need it (it has not left, and
  // its heartbeat is alive), up to --rdzv-timeout.
  const auto deadline = Clock::now() + seconds(o_.rdzv_timeout);
  while (Clock::now() < deadline && store_->add("left", 0) < o_.nnodes) {
    observe_heartbeats(/*reset=*/false);
    const auto now = Clock::now();
    bool alive = false;
    for (int k = 1; k < o_.nnodes; ++k) alive = alive || now - beat_changed_[k] <= stall_;
    if (!alive) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace nabla::apps
