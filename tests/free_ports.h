// Two consecutive free TCP ports, P and P + 1, for a test that starts nabla-run (whose launchers'
// store takes P and whose ranks' store takes P + 1), so that tests running side by side under
// `ctest -j` never share a port. Both are checked by binding them; the kernel hands out ports
// from its ephemeral range in turn, so one just released is not given out again at once.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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
  for (int attempt = 0; attempt < 50; ++attempt) {
    int a = -1, b = -1;
    const int port = detail::bind_port(0, a);
    const bool next_free = port > 0 && port < 65535 && detail::bind_port(port + 1, b) == port + 1;
    if (a >= 0) ::close(a);
    if (b >= 0) ::close(b);
    if (next_free) return port;
  }
  throw std::runtime_error("free_port_pair: found no two consecutive free ports");
}

}  // namespace nabla::testing
