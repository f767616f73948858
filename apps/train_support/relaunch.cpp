#include "nabla/apps/train_support/relaunch.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "nabla/core/error.h"

namespace nabla::train_support {

void relaunch_under_nabla_run(int nproc_per_node, int argc, char** argv) {
  const auto self = std::filesystem::read_symlink("/proc/self/exe");
  auto launcher = self.parent_path() / "nabla-run";
  if (!std::filesystem::exists(launcher)) launcher = "nabla-run";  // from PATH
  std::vector<std::string> args = {launcher.string(), "--nproc-per-node", std::to_string(nproc_per_node),
                                   "--", self.string()};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--nproc-per-node") {
      ++i;  // and its value
      continue;
    }
    if (a.rfind("--nproc-per-node=", 0) == 0) continue;
    args.push_back(a);
  }
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  ::execvp(cargs[0], cargs.data());
  throw Error("cannot start nabla-run (" + launcher.string() + "): " + std::strerror(errno));
}

}  // namespace nabla::train_support
