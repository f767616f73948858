// The Module base: registration, traversal, conversion and state dicts.
#include "nabla/nn/module.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <set>

#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/error.h"
#include "nabla/ops/copy.h"

namespace nabla::nn {

Tensor Module::forward(const Tensor& /*x*/) {
  NABLA_CHECK(false,
              "this module has no forward(const Tensor&): override it to call the module or put it in a "
              "Sequential, or call its own forward");
  return {};
}

void Module::check_new_name(const std::string& name) const {
  NABLA_CHECK(!name.empty() && name.find('.') == std::string::npos,
              "register: name \"{}\" must be non-empty and contain no '.'", name);
  auto taken = [&](const auto& list) {
    for (const auto& [n, _] : list) {
      if (n == name) return true;
    }
    return false;
  };
  NABLA_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_),
              "register: name \"{}\" is already registered in this module", name);
}

void Module::register_parameter(const std::string& name, Tensor& parameter, bool requires_grad) {
  check_new_name(name);
  if (parameter.defined()) {
    NABLA_CHECK(parameter.is_leaf(), "register_parameter(\"{}\"): a parameter must be a leaf tensor", name);
    parameter.requires_grad_(requires_grad);
  }
  parameters_.emplace_back(name, &parameter);
}

void Module::register_buffer(const std::string& name, Tensor& buffer) {
  check_new_name(name);
  buffers_.emplace_back(name, &buffer);
}

void Module::register_module(const std::string& name, Module& module) {
  check_new_name(name);
  NABLA_CHECK(&module != this, "register_module(\"{}\"): a module cannot be its own child", name);
  children_.emplace_back(name, &module);
}

void Module::register_modules(std::initializer_list<NamedModule> modules) {
  for (const auto& m : modules) register_module(m.name, m.module);
}

void Module::collect(const std::string& prefix, bool recurse, bool want_parameters,
                     std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& [name, t] : want_parameters ? parameters_ : buffers_) {
    if (t->defined()) out.emplace_back(prefix + name, *t);
  }
  if (!recurse) return;
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", true, want_parameters, out);
}

namespace {

// Note [Tied parameters]: two registered members may hold one tensor (a language model's output
// layer tied to its embedding: `lm_head.weight = wte.weight`). Listings keep its first name only,
// so parameters() and every optimizer see it once; state_dict() keeps every name, all sharing the
// storage, as PyTorch's do; to() converts it once and gives every holder the same result; and a
// strict load_state_dict accepts a dict that names any one of its holders.
std::vector<std::pair<std::string, Tensor>> first_of_each(std::vector<std::pair<std::string, Tensor>> all) {
  std::set<const TensorImpl*> seen;
  std::erase_if(all, [&](const auto& named) { return !seen.insert(named.second.impl()).second; });
  return all;
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", recurse, true, out);
  return first_of_each(std::move(out));
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", recurse, false, out);
  return first_of_each(std::move(out));
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [_, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [_, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_children() const {
  return children_;
}

std::vector<Module*> Module::children() const {
  std::vector<Module*> out;
  for (const auto& [_, c] : children_) out.push_back(c);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, Module*>> out{{"", const_cast<Module*>(this)}};
  for (const auto& [name, child] : children_) {
    for (auto& [sub, m] : child->named_modules()) out.emplace_back(sub.empty() ? name : name + "." + sub, m);
  }
  return out;
}

Module& Module::train(bool on) {
  training_ = on;
  for (const auto& [_, child] : children_) child->train(on);
  return *this;
}

void Module::convert_tensors(const std::function<Tensor(const Tensor&)>& convert) {
  NoGradGuard no_grad;
  std::map<const TensorImpl*, Tensor> done;  // a tied tensor converts once (Note [Tied parameters])
  convert_tree(convert, done);
}

void Module::convert_tree(const std::function<Tensor(const Tensor&)>& convert,
                          std::map<const TensorImpl*, Tensor>& done) {
  auto once = [&](Tensor& t, bool parameter) {
    if (!t.defined()) return;
    if (auto it = done.find(t.impl()); it != done.end()) {
      t = it->second;
      return;
    }
    const TensorImpl* before = t.impl();
    const bool requires_grad = t.requires_grad();
    Tensor converted = parameter ? convert(t).detach() : convert(t);
    if (!converted.is_same(t)) {
      t = converted;
      if (parameter) t.requires_grad_(requires_grad);
    }
    done.emplace(before, t);
  };
  for (auto& [_, t] : parameters_) once(*t, /*parameter=*/true);
  for (auto& [_, t] : buffers_) once(*t, /*parameter=*/false);
  for (auto& [_, child] : children_) child->convert_tree(convert, done);
}

Module& Module::to(Device device) {
  convert_tensors([&](const Tensor& t) { return t.device() == device ? t : t.to(device); });
  return *this;
}

Module& Module::to(DType dtype) {
  convert_tensors(
      [&](const Tensor& t) { return t.is_floating_point() && t.dtype() != dtype ? t.to(dtype) : t; });
  return *this;
}

Module& Module::to(MemoryFormat format) {
  convert_tensors(
      // contiguous(format) also gives a tensor that is both layouts (one channel, 1x1 kernel) the
      // format's exact strides, which convs read (see ops/conv.cpp).
      [&](const Tensor& t) { return t.dim() == 4 ? t.contiguous(format) : t; });
  return *this;
}

Module& Module::to(Device device, MemoryFormat format) {
  to(device);
  return to(format);
}

void Module::zero_grad(bool set_to_none) {
  for (auto& t : parameters()) {
    if (!t.grad().defined()) continue;
    if (set_to_none) {
      t.set_grad(Tensor());
    } else {
      NoGradGuard no_grad;
      t.mutable_grad().zero_();
    }
  }
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  for (const auto& [_, child] : children_) child->apply(fn);
  fn(*this);
  return *this;
}

StateDict Module::state_dict() const {
  // Every name, tied ones included (Note [Tied parameters]).
  std::vector<std::pair<std::string, Tensor>> parameters, buffers;
  collect("", true, true, parameters);
  collect("", true, false, buffers);
  StateDict out;
  for (auto& [name, t] : parameters) out.emplace(name, t.detach());
  for (auto& [name, t] : buffers) out.emplace(name, t);
  return out;
}

LoadResult Module::load_state_dict(const StateDict& dict, bool strict) {
  std::vector<std::pair<std::string, Tensor>> own, own_buffers;
  collect("", true, true, own);
  collect("", true, false, own_buffers);
  own.insert(own.end(), own_buffers.begin(), own_buffers.end());

  // A tied tensor is loaded when the dict names any one of its holders.
  std::set<const TensorImpl*> named_in_dict;
  for (const auto& [name, t] : own) {
    if (dict.count(name)) named_in_dict.insert(t.impl());
  }
  LoadResult result;
  std::vector<std::string> wrong_shape;
  std::set<std::string> own_names;
  for (const auto& [name, t] : own) {
    own_names.insert(name);
    auto it = dict.find(name);
    if (it == dict.end()) {
      if (!named_in_dict.count(t.impl())) result.missing_keys.push_back(name);
    } else if (!it->second.defined() || it->second.sizes() != t.sizes()) {
      wrong_shape.push_back(fmt::format("{} (model {}, given {})", name, shape_str(t.sizes()),
                                        it->second.defined() ? shape_str(it->second.sizes()) : "undefined"));
    }
  }
  for (const auto& [name, _] : dict) {
    if (!own_names.count(name)) result.unexpected_keys.push_back(name);
  }
  auto join = [](const std::vector<std::string>& v) { return fmt::format("{}", fmt::join(v, ", ")); };
  std::string problems;
  if (!wrong_shape.empty()) problems += "\n  wrongly shaped: " + join(wrong_shape);
  if (strict && !result.missing_keys.empty()) problems += "\n  missing: " + join(result.missing_keys);
  if (strict && !result.unexpected_keys.empty())
    problems += "\n  unexpected: " + join(result.unexpected_keys);
  NABLA_CHECK(problems.empty(),
              "load_state_dict: the state dict does not fit the model (nothing was loaded):{}", problems);

  NoGradGuard no_grad;
  for (auto& [name, t] : own) {
    auto it = dict.find(name);
    if (it != dict.end()) t.copy_(it->second);
  }
  return result;
}

}  // namespace nabla::nn
