// Public header. The Module base: a model is a plain class whose members are its layers,
// parameters and buffers, each registered once by name.
//
//   struct Net : nabla::nn::Module {
//     nabla::nn::Linear fc1, fc2;
//     Net() : fc1({.in = 784, .out = 128}), fc2({.in = 128, .out = 10}) {
//       register_modules({{"fc1", fc1}, {"fc2", fc2}});
//     }
//     nabla::Tensor forward(const nabla::Tensor& x) override { return fc2(nabla::relu(fc1(x))); }
//   };
//
// Registration stores pointers to the members, so a Module can be neither copied nor moved
// (both are deleted): build it in place, or behind a std::shared_ptr. Names are dotted by
// nesting ("layer1.0.conv1.weight") and listed in registration order, as PyTorch does.
// to(device / dtype / memory_format) replaces the registered tensors with converted ones (new
// leaves; gradients are dropped), so move a model before handing its parameters to an optimizer.
//
// Tying: two members may hold one parameter (`lm_head.weight = wte.weight;` after construction).
// parameters() lists it once, under its first name; state_dict() lists it under both names,
// sharing storage, as PyTorch does; to() keeps the tie; loading a dict that names either holder
// restores it (Note [Tied parameters] in module.cpp).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "nabla/core/device.h"
#include "nabla/core/dtype.h"
#include "nabla/core/shape.h"
#include "nabla/core/tensor.h"

namespace nabla::nn {

class Module;

// One entry of register_modules({{"conv1", conv1}, ...}).
struct NamedModule {
  std::string name;
  Module& module;
};

// What load_state_dict(dict, /*strict=*/false) skipped.
struct LoadResult {
  std::vector<std::string> missing_keys;     // in the model, not in the dict
  std::vector<std::string> unexpected_keys;  // in the dict, not in the model
};

using StateDict = std::map<std::string, Tensor>;

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  Module(Module&&) = delete;
  Module& operator=(Module&&) = delete;

  // The computation. Modules with one tensor in and one out override it, which lets containers
  // (Sequential) call them; others may define their own forward with any signature instead.
  virtual Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  // Dotted names in registration order: own entries first, then each child's. A tensor held by
  // several members (tied) is listed once, under its first name.
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, Module*>> named_children() const;
  std::vector<Module*> children() const;
  // This module (name "") and every descendant, parents before children.
  std::vector<std::pair<std::string, Module*>> named_modules() const;

  // Sets the mode of this module and every descendant (BatchNorm and Dropout read it).
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }

  // Converts every parameter and buffer. dtype applies to floating-point tensors only (BatchNorm's
  // int64 num_batches_tracked stays); a memory format applies to 4-d tensors only (conv weights).
  Module& to(Device device);
  Module& to(DType dtype);
  Module& to(MemoryFormat format);
  Module& to(Device device, MemoryFormat format);

  // Drops every parameter's gradient, or with set_to_none = false sets it to zeros.
  void zero_grad(bool set_to_none = true);

  // Calls fn on every descendant, then on this module (as PyTorch's apply).
  Module& apply(const std::function<void(Module&)>& fn);

  // Parameters and buffers by dotted name. The tensors share storage with the model's.
  StateDict state_dict() const;
  // Copies each value into the model's tensor in place (outside autograd; dtype and device are
  // converted). Wrongly shaped values are always an error; missing and unexpected keys are an
  // error when strict, and returned otherwise. One error names every offending key.
  LoadResult load_state_dict(const StateDict& dict, bool strict = true);

 protected:
  // The tensor becomes a leaf that requires grad. An undefined tensor (e.g. a disabled bias)
  // may be registered: it is listed nowhere until it is defined.
  void register_parameter(const std::string& name, Tensor& parameter, bool requires_grad = true);
  void register_buffer(const std::string& name, Tensor& buffer);
  void register_module(const std::string& name, Module& module);
  void register_modules(std::initializer_list<NamedModule> modules);

  // Replaces every registered tensor t with convert(t) (a parameter stays a leaf).
  void convert_tensors(const std::function<Tensor(const Tensor&)>& convert);

 private:
  void check_new_name(const std::string& name) const;
  // Every registered name, tied tensors under each of their names.
  void collect(const std::string& prefix, bool recurse, bool want_parameters,
               std::vector<std::pair<std::string, Tensor>>& out) const;
  void convert_tree(const std::function<Tensor(const Tensor&)>& convert,
                    std::map<const TensorImpl*, Tensor>& done);

  bool training_ = true;
  std::vector<std::pair<std::string, Tensor*>> parameters_;
  std::vector<std::pair<std::string, Tensor*>> buffers_;
  std::vector<std::pair<std::string, Module*>> children_;
};

}  // namespace nabla::nn
