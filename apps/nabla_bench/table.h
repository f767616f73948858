// The pure pieces of nabla-bench's reports, kept apart from the GPU code so that CPU tests
// cover them (tests/apps/bench_table_test.cpp compiles this file in):
//   - Table: a fixed-width text table (first column left-aligned, the rest right-aligned);
//   - parse_choices / parse_positive_ints: the comma lists of flags like `--amp off,fp16`;
//   - percentile: latency statistics, interpolated the way numpy and Python's
//     statistics.quantiles(method="inclusive") do, so nabla and the PyTorch script agree;
//   - ratio / format helpers for the "vs PyTorch" columns ("-" where there is no number);
//   - parse_json_rows / find_row: the JSON rows the PyTorch script prints, and the one that
//     matches a nabla row on the keys that define a configuration.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nabla::bench {

class Table {
 public:
  explicit Table(std::vector<std::string> headers);
  // One cell per header; a row of another length is an error (a bug in the caller).
  void add_row(std::vector<std::string> cells);
  size_t rows() const { return rows_.size(); }
  // Header line, a rule of dashes, then the rows; every line ends with '\n'.
  std::string render() const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// Splits "a,b" and checks every item against `allowed`. Empty items, duplicates and unknown
// values are errors that name `flag`, the bad item and the allowed values.
std::vector<std::string> parse_choices(std::string_view text, std::string_view flag,
                                       const std::vector<std::string>& allowed);
// The values of --amp and --layout.
const std::vector<std::string>& amp_choices();     // off, fp16, bf16
const std::vector<std::string>& layout_choices();  // nchw, channels-last
// The layouts a run measures: the --layout list, or {"channels-last"} for the older
// --channels-last flag, or {"nchw"} when neither is given. Both at once is an error.
std::vector<std::string> resolve_layouts(std::string_view layout_flag, bool channels_last_flag);

// Splits "16,32,64" into positive integers (duplicates and non-numbers are errors naming `flag`).
std::vector<int64_t> parse_positive_ints(std::string_view text, std::string_view flag);

// The q-th percentile (q in [0, 100]) with linear interpolation between the closest ranks:
// position (n - 1) * q / 100 in the sorted samples. Needs at least one sample.
double percentile(std::vector<double> samples, double q);

// nabla / PyTorch, or nothing when either side is missing, zero or not finite.
std::optional<double> ratio(std::optional<double> nabla, std::optional<double> torch);
// `value` with `precision` decimals, or "-" when there is none (or it is not finite).
std::string format_number(std::optional<double> value, int precision);
// A number stored under `key` in a JSON row, if it is there and numeric.
std::optional<double> number_at(const nlohmann::json& row, const std::string& key);

// Every line of `output` that parses as a JSON object (other lines, e.g. warnings, are skipped).
std::vector<nlohmann::json> parse_json_rows(std::string_view output);
// The first row of `rows` whose values equal `like`'s under every key in `keys`; nullptr if none.
const nlohmann::json* find_row(const std::vector<nlohmann::json>& rows, const nlohmann::json& like,
                               const std::vector<std::string>& keys);

}  // namespace nabla::bench
