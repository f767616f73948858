#include "nabla/apps/train_support/config_file.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

namespace nabla::train_support {
namespace {

using nlohmann::json;

std::string scalar_input(const json& value, const std::string& key) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  if (value.is_number()) return value.dump();
  throw CLI::ConfigError("config file: key '" + key + "' has a " + value.type_name() +
                         " value; allowed are strings, numbers, booleans, and arrays of those");
}

// Objects become CLI11 sections (parents), as TOML's [section] tables do.
void json_items(const json& object, const std::vector<std::string>& parents,
                std::vector<CLI::ConfigItem>& out) {
  for (const auto& [key, value] : object.items()) {
    if (value.is_object()) {
      auto inner = parents;
      inner.push_back(key);
      json_items(value, inner, out);
      continue;
    }
    CLI::ConfigItem item;
    item.parents = parents;
    item.name = key;
    if (value.is_array()) {
      for (const auto& element : value) item.inputs.push_back(scalar_input(element, key));
    } else {
      item.inputs.push_back(scalar_input(value, key));
    }
    out.push_back(std::move(item));
  }
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

bool configurable_option(const CLI::Option* opt) {
  return opt->get_configurable() && !opt->get_lnames().empty();
}

}  // namespace

std::vector<CLI::ConfigItem> JsonOrTomlConfig::from_config(std::istream& input) const {
  std::stringstream buffer;
  buffer << input.rdbuf();
  const std::string text = buffer.str();
  const auto first = text.find_first_not_of(" \t\r\n");
  std::vector<CLI::ConfigItem> items;
  if (first != std::string::npos && text[first] == '{') {
    json document;
    try {
      document = json::parse(text);
    } catch (const json::exception& e) {  // syntax errors, and numbers too large for a double
      throw CLI::ConfigError(std::string("config file: invalid JSON: ") + e.what());
    }
    json_items(document, {}, items);
  } else {
    std::istringstream toml_input(text);
    items = toml_.from_config(toml_input);
  }
  map_names(items);
  return items;
}

void JsonOrTomlConfig::map_names(std::vector<CLI::ConfigItem>& items) const {
  for (auto& item : items) {
    // CLI11's section markers ("++", "--") and sectioned keys belong to subcommands: left as they are.
    if (item.name == "++" || item.name == "--" || !item.parents.empty()) continue;
    std::string name = item.name;
    if (name.starts_with("--")) name = name.substr(2);
    std::replace(name.begin(), name.end(), '_', '-');
    item.name = name;
    if (app_ == nullptr) continue;
    if (app_->get_option_no_throw("--" + name) != nullptr) continue;
    // Unknown: name the key and the nearest long flag.
    std::string best;
    size_t best_distance = SIZE_MAX;
    for (const CLI::Option* opt : app_->get_options()) {
      if (!configurable_option(opt)) continue;
      for (const auto& lname : opt->get_lnames()) {
        size_t d = edit_distance(name, lname);
        if (d < best_distance) best_distance = d, best = lname;
      }
    }
    throw CLI::ConfigError("config file: unknown key '" + item.name + "'" +
                           (best.empty() ? std::string() : "; did you mean '" + best + "'?") +
                           " (keys are the long flag names, see --help)");
  }
}

std::string JsonOrTomlConfig::to_config(const CLI::App* app, bool default_also, bool /*write_description*/,
                                        std::string /*prefix*/) const {
  json out = json::object();
  for (const CLI::Option* opt : app->get_options()) {
    if (!configurable_option(opt) || opt == app->get_config_ptr() || opt == app->get_help_ptr()) continue;
    std::vector<std::string> values = opt->results();
    if (values.empty() && default_also && !opt->get_default_str().empty()) values = {opt->get_default_str()};
    if (values.empty()) continue;
    auto typed = [](const std::string& s) {  // numbers and booleans as JSON values, the rest as strings
      json v = json::parse(s, nullptr, /*allow_exceptions=*/false);
      return (v.is_number() || v.is_boolean()) ? v : json(s);
    };
    json value;
    if (opt->get_expected_min() == 0) {
      value = opt->as<bool>();  // a flag
    } else if (values.size() == 1 && opt->get_expected_max() <= 1) {
      value = typed(values[0]);
    } else {
      value = json::array();
      for (const auto& v : values) value.push_back(typed(v));
    }
    out[opt->get_lnames().front()] = value;
  }
  // A value need not be UTF-8 (a path on Linux is any bytes), which JSON cannot hold: such bytes
  // are written as U+FFFD instead of failing the whole dump.
  return out.dump(2, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace) + "\n";
}

CLI::Option* add_config_option(CLI::App& app) {
  app.config_formatter(std::make_shared<JsonOrTomlConfig>(&app));
  return app.set_config("--config", "",
                        "Read flags from a JSON or TOML file (keys are the long flag names); "
                        "flags on the command line win");
}

}  // namespace nabla::train_support
