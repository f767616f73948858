// Public header. Containers that own their modules: Sequential, ModuleList, ModuleDict.
//
//   nn::Sequential head({std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(...)});
//   auto& fc = head.emplace_back<nn::Linear>(nn::LinearOptions{.in = 128, .out = 10});
//   y = head(x);
//
// Children are named "0", "1", ... (ModuleDict: by key), as in PyTorch, so a state dict reads
// "downsample.0.weight".
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nabla/nn/module.h"

namespace nabla::nn {

// Calls its children in order, each on the previous one's output.
class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);

  void push_back(std::shared_ptr<Module> module);
  template <typename M, typename... Args>
  M& emplace_back(Args&&... args) {
    auto m = std::make_shared<M>(std::forward<Args>(args)...);
    push_back(m);
    return *m;
  }
  Module& operator[](size_t i) const;
  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  Tensor forward(const Tensor& x) override;

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

// An indexed list of modules; forward is yours to write.
class ModuleList : public Module {
 public:
  ModuleList() = default;
  ModuleList(std::initializer_list<std::shared_ptr<Module>> modules);

  void push_back(std::shared_ptr<Module> module);
  template <typename M, typename... Args>
  M& emplace_back(Args&&... args) {
    auto m = std::make_shared<M>(std::forward<Args>(args)...);
    push_back(m);
    return *m;
  }
  Module& operator[](size_t i) const;
  size_t size() const { return modules_.size(); }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

// Modules by name, in insertion order.
class ModuleDict : public Module {
 public:
  ModuleDict() = default;
  ModuleDict(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> modules);

  void insert(const std::string& key, std::shared_ptr<Module> module);
  Module& operator[](const std::string& key) const;
  bool contains(const std::string& key) const;
  size_t size() const { return modules_.size(); }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 private:
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> modules_;
};

}  // namespace nabla::nn
