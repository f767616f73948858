// Two consecutive free TCP ports, P and P + 1, for a test that starts nabla-run (whose launchers'
// store takes P and whose ranks' store takes P + 1), so that tests running side by side under
// `ctest -j` rarely share a port. P is drawn at random below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), where outgoing connections never take a port, and both are
// checked by binding them.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include <fstream>
#include <random>
#include <stdexcept>

namespace nabla::testing {

namespace detail {
// Binds `port` (0: any free one) on every interface; returns the bound port, or 0 on failure.
inline int bind_port(int port, int& fd) {
  fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t size = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &size) != 0) {
    ::close(fd);
    fd = -1;
    return 0;
  }
  return ntohs(addr.sin_port);
}
}  // namespace detail

inline int free_port_pair() {
  int ephemeral_low = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> ephemeral_low;
  std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<int> pick(20000, std::max(20001, ephemeral_low - 2));
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = pick(random);
    int a = -1, b = -1;
    const bool free = detail::bind_port(port, a) == port && detail::bind_port(port + 1, b) == port + 1;
    if (a >= 0) ::close(a);
    if (b >= 0) ::close(b);
    if (free) return port;
  }
  throw std::runtime_error("free_port_pair: found no two consecutive free ports");
}

}  // namespace nabla::testing
