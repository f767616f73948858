// Public header. Custom differentiable ops written by users, as torch.autograd.Function:
//
//   struct ScaledTanh : nabla::autograd::Function<ScaledTanh> {
//     static Tensor forward(Context& ctx, const Tensor& x, double alpha) {
//       auto y = nabla::tanh(x);
//       ctx.save_for_backward({y});
//       ctx.saved_data["alpha"] = alpha;
//       return y * alpha;
//     }
//     static TensorList backward(Context& ctx, const TensorList& grads) {
//       auto y = ctx.saved()[0];
//       return {grads[0] * ctx.saved_data["alpha"].to_double() * (1 - y * y)};
//     }
//   };
//   Tensor out = ScaledTanh::apply(x, 2.0);
//
// apply() runs forward with grad mode off (so its ops record nothing), then records one node
// whose backward calls Derived::backward. The Tensor arguments are the op's inputs, in order;
// other arguments are passed through. forward returns a Tensor or a TensorList (several
// outputs); backward returns one gradient per Tensor input (undefined where none is needed).
// Saved tensors go through save_for_backward, never into saved_data or lambdas: they are
// version-checked when backward runs and freed after it.
#pragma once

#include <cxxabi.h>

#include <concepts>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <variant>
#include <vector>

#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/tensor.h"
#include "nabla/ops/autograd/function.h"
#include "nabla/ops/factory.h"

namespace nabla::autograd {

// A non-tensor value kept for backward: a number, flag, string or shape.
class SavedValue {
 public:
  using Value = std::variant<std::monostate, double, int64_t, bool, std::string, Shape>;
  SavedValue() = default;
  SavedValue(double v) : value_(v) {}
  SavedValue(float v) : value_(static_cast<double>(v)) {}
  SavedValue(bool v) : value_(v) {}
  template <std::integral T>
  requires(!std::same_as<T, bool>) SavedValue(T v) : value_(static_cast<int64_t>(v)) {}
  SavedValue(std::string v) : value_(std::move(v)) {}
  SavedValue(const char* v) : value_(std::string(v)) {}
  SavedValue(Shape v) : value_(std::move(v)) {}

  // An int64 converts to double; every other mismatch is an error naming both kinds.
  double to_double() const {
    if (auto* i = std::get_if<int64_t>(&value_)) return static_cast<double>(*i);
    return get<double>("double");
  }
  int64_t to_int() const { return get<int64_t>("int64"); }
  bool to_bool() const { return get<bool>("bool"); }
  const std::string& to_string() const { return get<std::string>("string"); }
  const Shape& to_shape() const { return get<Shape>("Shape"); }
  const Value& value() const { return value_; }

 private:
  template <typename T>
  const T& get(const char* wanted) const {
    static constexpr const char* kinds[] = {"nothing", "double", "int64", "bool", "string", "Shape"};
    NABLA_CHECK(std::holds_alternative<T>(value_), "saved_data: asked for a {}, but the value holds {}",
                wanted, kinds[value_.index()]);
    return std::get<T>(value_);
  }
  Value value_;
};

// What forward and backward share. Indices of needs_input_grad count Tensor arguments only.
class Context {
 public:
  std::map<std::string, SavedValue> saved_data;

  // Tensors backward needs (inputs or outputs); replaces earlier calls.
  void save_for_backward(TensorList tensors) { to_save_ = std::move(tensors); }
  // In backward: the saved tensors, each checked for in-place modification since it was saved.
  const TensorList& saved() const {
    NABLA_CHECK(in_backward_, "{}: ctx.saved() is available in backward only; forward has the tensors itself",
                name_);
    return unpacked_;
  }
  // Outputs that have no gradient (indices, masks): they get no history and their grad_outputs
  // entry in backward is zeros.
  void mark_non_differentiable(TensorList tensors) {
    non_differentiable_.insert(non_differentiable_.end(), tensors.begin(), tensors.end());
  }
  // Inputs that forward modified in place; each must also be returned as an output.
  void mark_dirty(TensorList tensors) { dirty_.insert(dirty_.end(), tensors.begin(), tensors.end()); }
  bool needs_input_grad(size_t i) const {
    NABLA_CHECK(i < needs_input_grad_.size(), "{}: needs_input_grad({}) but the op has {} tensor inputs",
                name_, i, needs_input_grad_.size());
    return needs_input_grad_[i];
  }

 private:
  template <class>
  friend struct Function;
  static bool contains(const TensorList& list, const Tensor& t) {
    for (const auto& x : list) {
      if (x.defined() && x.is_same(t)) return true;
    }
    return false;
  }

  const char* name_ = "";
  TensorList to_save_, non_differentiable_, dirty_, unpacked_;
  std::vector<bool> needs_input_grad_;
  bool in_backward_ = false;
  // Per input: its shape, for the check of returned gradients. Per output: what a zero
  // gradient looks like, for outputs no gradient reached.
  std::vector<Shape> input_sizes_;
  std::vector<Shape> output_sizes_;
  std::vector<TensorOptions> output_options_;
};

template <class Derived>
struct Function {
  template <class... Args>
  static auto apply(Args&&... args) {
    TensorList inputs;
    (collect(inputs, args), ...);
    auto ctx = std::make_shared<Context>();
    ctx->name_ = name();
    for (const auto& in : inputs) {
      ctx->needs_input_grad_.push_back(GradMode::is_enabled() && in.defined() && in.requires_grad());
      ctx->input_sizes_.push_back(in.defined() ? in.sizes() : Shape{});
    }
    std::vector<uint32_t> versions;
    for (const auto& in : inputs) versions.push_back(in.defined() ? in.version() : 0);
    const bool record_graph = needs_grad(inputs);

    using Result = decltype(Derived::forward(*ctx, std::forward<Args>(args)...));
    static_assert(std::is_same_v<Result, Tensor> || std::is_same_v<Result, TensorList>,
                  "Function::forward must return Tensor or TensorList");
    Result result;
    {
      NoGradGuard no_grad;
      result = Derived::forward(*ctx, std::forward<Args>(args)...);
    }
    TensorList outputs;
    if constexpr (std::is_same_v<Result, Tensor>) {
      outputs = {result};
    } else {
      outputs = result;
    }
    finish(ctx, inputs, versions, outputs, record_graph);
    return result;
  }

  // The op's name in errors and graph dumps: the demangled type name.
  static const char* name() {
    static const std::string n = [] {
      int status = 0;
      char* d = abi::__cxa_demangle(typeid(Derived).name(), nullptr, nullptr, &status);
      std::string s = status == 0 && d ? d : typeid(Derived).name();
      std::free(d);
      return s;
    }();
    return n.c_str();
  }

 private:
  template <class T>
  static void collect(TensorList& inputs, const T& arg) {
    if constexpr (std::is_same_v<std::remove_cvref_t<T>, Tensor>) inputs.push_back(arg);
  }

  static void finish(const std::shared_ptr<Context>& ctx, const TensorList& inputs,
                     const std::vector<uint32_t>& versions, TensorList outputs, bool record_graph) {
    const char* op = ctx->name_;
    for (const auto& d : ctx->dirty_) {
      size_t i = 0;
      while (i < inputs.size() && !(inputs[i].defined() && inputs[i].is_same(d))) ++i;
      NABLA_CHECK(i < inputs.size(), "{}: mark_dirty() got a tensor that is not an input of the op", op);
      NABLA_CHECK(Context::contains(outputs, d),
                  "{}: a tensor marked dirty must also be returned as an output", op);
      // Kernels writing through data_ptr() do not bump the version; the saved-tensor check relies on it.
      // Nor could the step compiler keep what a recipe read there before the write.
      if (d.version() == versions[i]) note_unseen_inplace_write(d);
      check_inplace(d, op);
      if (d.version() == versions[i]) d.bump_version();
    }
    for (const auto& out : outputs) {
      ctx->output_sizes_.push_back(out.defined() ? out.sizes() : Shape{});
      ctx->output_options_.push_back(out.defined() ? out.options() : TensorOptions{});
    }
    if (!record_graph) {
      ctx->to_save_.clear();
      return;
    }
    // Outputs get the node as grad_fn, except non-differentiable ones. A dirty input is recorded
    // through a fresh alias whose history it then takes over (rebase_history), so the node's
    // edge still points at the input's old history.
    TensorList recorded(outputs.size()), save = ctx->to_save_;
    std::vector<std::pair<Tensor, Tensor>> rebase;
    for (size_t i = 0; i < outputs.size(); ++i) {
      const Tensor& out = outputs[i];
      if (!out.defined() || Context::contains(ctx->non_differentiable_, out)) continue;
      if (Context::contains(ctx->dirty_, out)) {
        Tensor alias = out.detach();
        for (auto& s : save) {
          if (s.defined() && s.is_same(out)) s = alias;
        }
        rebase.emplace_back(out, alias);
        recorded[i] = alias;
      } else {
        recorded[i] = out;
      }
    }
    ctx->to_save_.clear();
    ctx->non_differentiable_.clear();
    ctx->dirty_.clear();
    record(op, inputs, recorded, save, [ctx](BackwardContext& b) { return run_backward(*ctx, b); });
    for (auto& [self, alias] : rebase) rebase_history(self, alias);
  }

  static TensorList run_backward(Context& ctx, BackwardContext& b) {
    const char* op = ctx.name_;
    TensorList grads = b.grads;
    for (size_t i = 0; i < grads.size() && i < ctx.output_sizes_.size(); ++i) {
      if (!grads[i].defined()) grads[i] = zeros(ctx.output_sizes_[i], ctx.output_options_[i]);
    }
    ctx.unpacked_ = b.saved;
    ctx.needs_input_grad_ = b.needs_input_grad;
    ctx.in_backward_ = true;
    struct Reset {
      Context& c;
      ~Reset() {
        c.unpacked_.clear();
        c.in_backward_ = false;
      }
    } reset{ctx};
    TensorList result = Derived::backward(ctx, grads);
    NABLA_CHECK(
        result.size() == ctx.input_sizes_.size(),
        "{}::backward returned {} gradients, but forward took {} tensor inputs; return one per tensor "
        "input (an undefined Tensor where none is needed)",
        op, result.size(), ctx.input_sizes_.size());
    for (size_t i = 0; i < result.size(); ++i) {
      if (!result[i].defined() || !ctx.needs_input_grad_[i]) continue;
      NABLA_CHECK(result[i].sizes() == ctx.input_sizes_[i],
                  "{}::backward returned a gradient of shape {} for input {}, which has shape {}", op,
                  shape_str(result[i].sizes()), i, shape_str(ctx.input_sizes_[i]));
    }
    return result;
  }
};

}  // namespace nabla::autograd
