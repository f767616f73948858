#include "nabla_bench/torch_compare.h"

#include <sys/wait.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "nabla_bench/table.h"

namespace nabla::bench {
namespace {

std::filesystem::path executable_dir() {
  std::error_code error;
  auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::filesystem::path() : self.parent_path();
}

}  // namespace

std::string find_torch_script(const std::string& explicit_path, std::string& tried, const std::string& name) {
  std::vector<std::filesystem::path> candidates;
  if (!explicit_path.empty()) {
    candidates.emplace_back(explicit_path);  // given: the only place to look
  } else {
    if (auto dir = executable_dir(); !dir.empty()) candidates.push_back(dir / name);
    candidates.push_back(std::filesystem::path("bench") / "pytorch" / name);
  }
  tried.clear();
  for (const auto& path : candidates) {
    std::error_code error;
    if (std::filesystem::is_regular_file(path, error)) return std::filesystem::absolute(path).string();
    tried += (tried.empty() ? "" : ", ") + path.string();
  }
  return "";
}

std::string shell_quote(const std::string& word) {
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

TorchComparison run_torch_script(const TorchOptions& options, const std::vector<std::string>& args,
                                 const std::string& name) {
  TorchComparison result;
  std::string tried;
  const std::string script = find_torch_script(options.script, tried, name);
  if (script.empty()) {
    result.skipped =
        "the PyTorch script " + name + " was not found (looked at " + tried + "; pass --torch-script PATH)";
    return result;
  }
  std::string command = shell_quote(options.python) + " " + shell_quote(script);
  for (const auto& arg : args) {
    command += ' ';
    command += shell_quote(arg);
  }
  std::printf("PyTorch: %s\n", command.c_str());
  std::fflush(stdout);  // the child writes to the same terminal
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) {
    result.skipped = "could not start " + options.python + ": " + std::strerror(errno);
    return result;
  }
  std::string output, line;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe)) {
    line += buffer;
    if (line.back() != '\n') continue;  // a line longer than the buffer: keep reading it
    std::printf("  torch| %s", line.c_str());
    std::fflush(stdout);
    output += line;
    line.clear();
  }
  output += line;
  const int status = ::pclose(pipe);
  const int code =
      WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  for (auto& row : parse_json_rows(output)) {
    if (row.contains("skipped")) {
      result.skipped = row["skipped"].is_string() ? row["skipped"].get<std::string>() : row["skipped"].dump();
      result.rows.clear();
      return result;
    }
    if (row.contains("bench")) result.rows.push_back(std::move(row));
  }
  if (code == 127) {
    result.skipped =
        "'" + options.python + "' was not found (install python3 with torch, or pass --python PATH)";
    result.rows.clear();
  } else if (code != 0 && result.rows.empty()) {
    result.skipped =
        fmt::format("{} exited with status {} and gave no rows (its messages are above)", script, code);
  } else if (result.rows.empty()) {
    result.skipped = script + " printed no result rows";
  } else if (code != 0) {
    std::printf("PyTorch: %s exited with status %d after %zu rows; comparing those\n", script.c_str(), code,
                result.rows.size());
  }
  return result;
}

void attach_torch_rows(std::vector<nlohmann::json>& nabla_rows, const std::vector<nlohmann::json>& torch_rows,
                       const std::vector<std::string>& match_keys, const std::vector<std::string>& metrics,
                       const std::string& prefix) {
  const std::string ratio_prefix = prefix == "torch" ? "ratio_" : prefix + "_ratio_";
  for (auto& row : nabla_rows) {
    const nlohmann::json* torch = find_row(torch_rows, row, match_keys);
    for (const auto& metric : metrics) {
      auto theirs = torch ? number_at(*torch, metric) : std::nullopt;
      auto r = ratio(number_at(row, metric), theirs);
      row[prefix + "_" + metric] = theirs ? nlohmann::json(*theirs) : nlohmann::json(nullptr);
      row[ratio_prefix + metric] = r ? nlohmann::json(*r) : nlohmann::json(nullptr);
    }
  }
}

}  // namespace nabla::bench
