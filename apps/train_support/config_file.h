// `--config FILE` for nabla-train: a JSON or TOML file whose keys are the long flag names, read by
// CLI11's own config mechanism, so flags given on the command line override the file.
//
//   runs/rn50.json:   {"arch": "resnet50", "batch-size": 256, "lr": 0.1, "nesterov": true}
//   runs/rn50.toml:   arch = "resnet50"
//                     batch-size = 256
//   nabla-train --config runs/rn50.json --lr 0.2      # lr 0.2, the rest from the file
//
// CLI11 2.1 reads TOML/INI natively but not JSON; JsonOrTomlConfig reads a file that starts with
// '{' as JSON (nlohmann) and anything else through CLI11's TOML reader. Keys may be written
// "batch-size", "batch_size" or "--batch-size"; an unknown key is an error that names the key and
// the closest flag. Writing (CLI::App::config_to_str) produces JSON.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace nabla::train_support {

class JsonOrTomlConfig : public CLI::Config {
 public:
  // `app` (may be null) is used to map and check key names; it must outlive this object, as it
  // does when the app owns it through config_formatter().
  explicit JsonOrTomlConfig(const CLI::App* app = nullptr) : app_(app) {}

  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;
  // The options as one JSON object: given values, and defaults too when default_also.
  std::string to_config(const CLI::App* app, bool default_also, bool write_description,
                        std::string prefix) const override;

 private:
  void map_names(std::vector<CLI::ConfigItem>& items) const;

  const CLI::App* app_;
  CLI::ConfigTOML toml_;
};

// Adds `--config FILE` to `app` and installs JsonOrTomlConfig as its config reader.
CLI::Option* add_config_option(CLI::App& app);

}  // namespace nabla::train_support
