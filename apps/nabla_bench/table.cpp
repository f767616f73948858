#include "nabla_bench/table.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>

#include "nabla/core/error.h"

namespace nabla::bench {
namespace {

std::vector<std::string> split_commas(std::string_view text) {
  std::vector<std::string> items;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string_view item = text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    // Spaces around items ("off, fp16") are forgiven; an empty item is not.
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    items.emplace_back(item);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return items;
}

}  // namespace

Table::Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}

void Table::add_row(std::vector<std::string> cells) {
  NABLA_ASSERT(cells.size() == headers_.size(), "a table row needs {} cells, got {}", headers_.size(),
               cells.size());
  rows_.push_back(std::move(cells));
}

std::string Table::render() const {
  std::vector<size_t> width(headers_.size());
  for (size_t c = 0; c < headers_.size(); ++c) {
    width[c] = headers_[c].size();
    for (const auto& row : rows_) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t c = 0; c < cells.size(); ++c) {
      if (c > 0) out += "  ";
      // The first column names the row; numbers line up on the right.
      out += c == 0 ? fmt::format("{:<{}}", cells[c], width[c]) : fmt::format("{:>{}}", cells[c], width[c]);
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::string out = line(headers_);
  size_t total = 0;
  for (size_t w : width) total += w;
  out += std::string(total + 2 * (width.size() - 1), '-') + "\n";
  for (const auto& row : rows_) out += line(row);
  return out;
}

std::vector<std::string> parse_choices(std::string_view text, std::string_view flag,
                                       const std::vector<std::string>& allowed) {
  std::string allowed_list = fmt::format("{}", fmt::join(allowed, ", "));
  std::vector<std::string> items = split_commas(text);
  std::set<std::string> seen;
  for (const auto& item : items) {
    NABLA_CHECK(!item.empty(), "{}: expected a comma-separated list of {}, got '{}' (an empty item)", flag,
                allowed_list, text);
    NABLA_CHECK(std::find(allowed.begin(), allowed.end(), item) != allowed.end(),
                "{}: '{}' is not one of {} (got '{}')", flag, item, allowed_list, text);
    NABLA_CHECK(seen.insert(item).second, "{}: '{}' is listed twice in '{}'", flag, item, text);
  }
  return items;
}

const std::vector<std::string>& amp_choices() {
  static const std::vector<std::string> choices = {"off", "fp16", "bf16"};
  return choices;
}

const std::vector<std::string>& layout_choices() {
  static const std::vector<std::string> choices = {"nchw", "channels-last"};
  return choices;
}

std::vector<std::string> resolve_layouts(std::string_view layout_flag, bool channels_last_flag) {
  NABLA_CHECK(layout_flag.empty() || !channels_last_flag,
              "give --layout or --channels-last, not both (--channels-last is --layout channels-last)");
  if (channels_last_flag) return {"channels-last"};
  if (layout_flag.empty()) return {"nchw"};
  return parse_choices(layout_flag, "--layout", layout_choices());
}

std::vector<int64_t> parse_positive_ints(std::string_view text, std::string_view flag) {
  std::vector<int64_t> values;
  for (const auto& item : split_commas(text)) {
    errno = 0;
    char* end = nullptr;
    long long value = item.empty() ? 0 : std::strtoll(item.c_str(), &end, 10);
    NABLA_CHECK(!item.empty() && end && *end == '\0' && errno == 0 && value > 0,
                "{}: expected a comma-separated list of positive integers, got '{}' (bad item '{}')", flag,
                text, item);
    NABLA_CHECK(std::find(values.begin(), values.end(), value) == values.end(),
                "{}: {} is listed twice in '{}'", flag, value, text);
    values.push_back(value);
  }
  return values;
}

double percentile(std::vector<double> samples, double q) {
  NABLA_CHECK(!samples.empty(), "percentile: expected at least one sample");
  NABLA_CHECK(q >= 0 && q <= 100, "percentile: expected q in [0, 100], got {}", q);
  std::sort(samples.begin(), samples.end());
  const double position = static_cast<double>(samples.size() - 1) * q / 100.0;
  const auto below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, samples.size() - 1);
  const double weight = position - static_cast<double>(below);
  return samples[below] + (samples[above] - samples[below]) * weight;
}

std::optional<double> ratio(std::optional<double> nabla, std::optional<double> torch) {
  if (!nabla || !torch || !std::isfinite(*nabla) || !std::isfinite(*torch) || *torch == 0 || *nabla == 0)
    return std::nullopt;
  return *nabla / *torch;
}

std::string format_number(std::optional<double> value, int precision) {
  if (!value || !std::isfinite(*value)) return "-";
  return fmt::format("{:.{}f}", *value, precision);
}

std::optional<double> number_at(const nlohmann::json& row, const std::string& key) {
  if (!row.is_object()) return std::nullopt;
  auto it = row.find(key);
  if (it == row.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::vector<nlohmann::json> parse_json_rows(std::string_view output) {
  std::vector<nlohmann::json> rows;
  size_t start = 0;
  while (start < output.size()) {
    size_t end = output.find('\n', start);
    if (end == std::string_view::npos) end = output.size();
    std::string_view line = output.substr(start, end - start);
    start = end + 1;
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.empty() || line.front() != '{') continue;
    auto row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (row.is_object()) rows.push_back(std::move(row));
  }
  return rows;
}

const nlohmann::json* find_row(const std::vector<nlohmann::json>& rows, const nlohmann::json& like,
                               const std::vector<std::string>& keys) {
  for (const auto& row : rows) {
    bool same = std::all_of(keys.begin(), keys.end(), [&](const std::string& key) {
      return row.contains(key) && like.contains(key) && row.at(key) == like.at(key);
    });
    if (same) return &row;
  }
  return nullptr;
}

}  // namespace nabla::bench
