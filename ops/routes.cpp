// The owner of the Routes in force.
//
// Note [Routes]
// Every choice among implementations of one op is made from one Routes value. Front ends take a
// snapshot (routes()) once per op and pass it down to the backend, which never reads global
// state of its own; a backward closure keeps its forward's snapshot. The value is process-wide
// rather than per device or per thread: nabla runs one process per GPU, graph capture and
// DataLoader threads must see what the training thread set, and PyTorch's flags, which users
// carry over, behave the same way. A mutex guards it; an op reads it once, which costs far less
// than the launch it decides.
#include "nabla/ops/routes.h"

#include <mutex>

namespace nabla {

namespace {

std::mutex& routes_mutex() {
  static std::mutex m;
  return m;
}

Routes& routes_in_force() {
  static Routes r;
  return r;
}

}  // namespace

Routes routes() {
  std::lock_guard lock(routes_mutex());
  return routes_in_force();
}

RoutesGuard::RoutesGuard(const Routes& routes) {
  std::lock_guard lock(routes_mutex());
  previous_ = routes_in_force();
  routes_in_force() = routes;
}

RoutesGuard::~RoutesGuard() {
  std::lock_guard lock(routes_mutex());
  routes_in_force() = previous_;
}

}  // namespace nabla
