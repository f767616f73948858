// Sequential, ModuleList and ModuleDict.
#include "nabla/nn/containers.h"

#include "nabla/core/error.h"

namespace nabla::nn {

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) push_back(m);
}

void Sequential::push_back(std::shared_ptr<Module> module) {
  NABLA_CHECK(module != nullptr, "Sequential::push_back: null module");
  register_module(std::to_string(modules_.size()), *module);
  modules_.push_back(std::move(module));
}

Module& Sequential::operator[](size_t i) const {
  NABLA_CHECK(i < modules_.size(), "Sequential: index {} out of range for {} modules", i, modules_.size());
  return *modules_[i];
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& m : modules_) y = m->forward(y);
  return y;
}

ModuleList::ModuleList(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) push_back(m);
}

void ModuleList::push_back(std::shared_ptr<Module> module) {
  NABLA_CHECK(module != nullptr, "ModuleList::push_back: null module");
  register_module(std::to_string(modules_.size()), *module);
  modules_.push_back(std::move(module));
}

Module& ModuleList::operator[](size_t i) const {
  NABLA_CHECK(i < modules_.size(), "ModuleList: index {} out of range for {} modules", i, modules_.size());
  return *modules_[i];
}

ModuleDict::ModuleDict(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> modules) {
  for (const auto& [key, m] : modules) insert(key, m);
}

void ModuleDict::insert(const std::string& key, std::shared_ptr<Module> module) {
  NABLA_CHECK(module != nullptr, "ModuleDict::insert(\"{}\"): null module", key);
  register_module(key, *module);  // rejects a duplicate key
  modules_.emplace_back(key, std::move(module));
}

bool ModuleDict::contains(const std::string& key) const {
  for (const auto& [k, _] : modules_) {
    if (k == key) return true;
  }
  return false;
}

Module& ModuleDict::operator[](const std::string& key) const {
  for (const auto& [k, m] : modules_) {
    if (k == key) return *m;
  }
  NABLA_CHECK(false, "ModuleDict: no module named \"{}\"", key);
  return *modules_.front().second;
}

}  // namespace nabla::nn
