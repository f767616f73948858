#include "nabla/distributed/ddp.h"

#include <map>

#include "nabla/core/autograd/grad_mode.h"
#include "nabla/ops/autograd/engine.h"
#include "nabla/ops/ops.h"

namespace nabla::distributed {

struct DistributedDataParallel::State : std::enable_shared_from_this<State> {
  struct Slot {
    std::string name;
    Tensor param;
    Tensor view;  // this parameter's slice of its bucket, with the parameter's sizes and strides
    size_t bucket = 0;
    bool ready = false;
  };
  struct Bucket {
    Tensor flat;
    std::vector<size_t> slots;
    size_t pending = 0;
    std::shared_ptr<Work> work;
  };

  ProcessGroup* group = nullptr;
  DdpOptions options;
  std::vector<Slot> slots;
  std::vector<Bucket> buckets;
  nn::Module* module = nullptr;
  // broadcast_buffers: the flat storage of each (dtype, device) group of buffers.
  std::map<std::pair<int, std::string>, Tensor> buffer_flats;
  bool sync_enabled = true;
  bool in_backward = false;
  size_t next_launch = 0;

  void start_backward() {
    in_backward = true;
    next_launch = 0;
    for (auto& s : slots) s.ready = false;
    for (auto& b : buckets) {
      b.pending = b.slots.size();
      b.work.reset();
    }
  }

  // Makes the parameter's .grad its bucket view (a first accumulation creates a fresh tensor).
  // Under no_sync, where every gradient is adopted as it arrives.
  void adopt_gradient(Slot& slot) {
    const Tensor& grad = slot.param.grad();
    if (grad.defined() && grad.data_ptr() == slot.view.data_ptr()) return;
    NoGradGuard no_grad;
    if (grad.defined()) {
      slot.view.copy_(grad);
    } else {
      slot.view.zero_();
    }
    slot.param.set_grad(slot.view);
  }

  // The same for a whole bucket just before its allreduce: the fresh gradients move into their
  // views in one batched copy (copy_many), not one copy per parameter, most of them small. A
  // parameter with no gradient (find_unused_parameters) takes part as zeros.
  void adopt_bucket(const Bucket& bucket) {
    NoGradGuard no_grad;
    TensorList views, grads;
    for (size_t i : bucket.slots) {
      Slot& slot = slots[i];
      const Tensor& grad = slot.param.grad();
      if (grad.defined() && grad.data_ptr() == slot.view.data_ptr()) continue;
      if (!grad.defined()) {
        adopt_gradient(slot);
        continue;
      }
      views.push_back(slot.view);
      grads.push_back(grad);
    }
    copy_many(views, grads);
    for (size_t i : bucket.slots) {
      Slot& slot = slots[i];
      if (slot.param.grad().data_ptr() != slot.view.data_ptr()) slot.param.set_grad(slot.view);
    }
  }

  void launch_ready_buckets() {
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
      auto& b = buckets[next_launch++];
      adopt_bucket(b);
      b.work = group->allreduce(b.flat, ReduceOp::average);
    }
  }

  void on_gradient(size_t index) {
    if (!in_backward) {
      start_backward();
      autograd::queue_callback([weak = weak_from_this()] {
        if (auto state = weak.lock()) state->finish_backward();
      });
    }
    Slot& slot = slots[index];
    if (!sync_enabled) {
      adopt_gradient(slot);  // accumulate in the bucket, for the backward that syncs
      return;
    }
    // The fresh gradient stays the .grad until its bucket is full (adopt_bucket). A second
    // accumulation in the same backward adds into it, or into the view once the bucket is out.
    if (slot.ready) return;
    slot.ready = true;
    --buckets[slot.bucket].pending;
    launch_ready_buckets();
  }

  // Launches the broadcast of every buffer group from rank 0 (one collective per dtype and
  // device) and returns the work.
  std::vector<std::shared_ptr<Work>> start_buffer_broadcast();

  void finish_backward() {
    in_backward = false;
    if (!sync_enabled) return;
    std::vector<std::string> unused;
    for (auto& s : slots) {
      if (s.ready) continue;
      if (!options.find_unused_parameters) {
        unused.push_back(s.name);
        continue;
      }
      // Its slot takes part as zeros (or as what no_sync passes accumulated), so ranks that did
      // use the parameter still average over the whole world.
      s.ready = true;
      --buckets[s.bucket].pending;
    }
    if (!unused.empty()) {
      std::string names;
      for (size_t i = 0; i < unused.size() && i < 8; ++i) names += (i ? ", " : "") + unused[i];
      if (unused.size() > 8) names += fmt::format(", ... ({} in all)", unused.size());
      throw Error(
          fmt::format("DistributedDataParallel: parameters got no gradient in this backward pass: {}. Every "
                      "rank must produce a gradient for every parameter, or the allreduce would hang. Use "
                      "them in forward, set requires_grad_(false) on them before wrapping, or construct DDP "
                      "with {{.find_unused_parameters = true}}",
                      names));
    }
    launch_ready_buckets();
    // A group that launches collectives only once their inputs are ready (NCCL's when-ready
    // mode) makes these waits block the host until the device gets there; all but the last
    // bucket's. That one, and the buffer broadcast behind it, go out at once (launch_pending),
    // so the host stays ahead of the device for the optimizer step and the next forward.
    for (size_t i = 0; i + 1 < buckets.size(); ++i) {
      if (buckets[i].work) buckets[i].work->wait();
    }
    // Rank 0's running statistics go out behind the last bucket. After the whole backward, not
    // after the forward: a checkpointed segment's recompute updates them again during backward.
    std::vector<std::shared_ptr<Work>> works;
    if (options.broadcast_buffers && module->is_training() && group->size() > 1)
      works = start_buffer_broadcast();
    group->launch_pending();
    if (!buckets.empty() && buckets.back().work) buckets.back().work->wait();
    for (auto& w : works) w->wait();
  }
};

DistributedDataParallel::DistributedDataParallel(nn::Module& module, ProcessGroup& group, DdpOptions options)
    : module_(module), state_(std::make_shared<State>()) {
  NABLA_CHECK(options.bucket_cap_mb > 0 && options.first_bucket_cap_mb > 0,
              "DistributedDataParallel: bucket sizes must be positive, got {} MB and first {} MB",
              options.bucket_cap_mb, options.first_bucket_cap_mb);
  state_->group = &group;
  state_->module = &module;
  state_->options = options;

  // Everyone starts from rank 0's weights and buffers.
  {
    NoGradGuard no_grad;
    for (auto& [name, p] : module.named_parameters()) {
      Tensor t = p.contiguous();
      group.broadcast(t, 0)->wait();
      if (t.data_ptr() != p.data_ptr()) p.copy_(t);
    }
  }
  broadcast_buffers();

  // Buckets in reverse registration order, split by dtype and device, capped by size.
  auto params = module.named_parameters();
  std::vector<std::pair<std::string, Tensor>> trainable;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    if (it->second.requires_grad()) trainable.push_back(*it);
  }
  NABLA_CHECK(!trainable.empty(), "DistributedDataParallel: the module has no parameters that require grad");
  std::vector<std::vector<size_t>> groups;
  std::vector<size_t> current;
  size_t current_bytes = 0;
  for (size_t i = 0; i < trainable.size(); ++i) {
    const Tensor& p = trainable[i].second;
    double cap = (groups.empty() ? options.first_bucket_cap_mb : options.bucket_cap_mb) * 1024 * 1024;
    bool other_kind = !current.empty() && (trainable[current.front()].second.dtype() != p.dtype() ||
                                           trainable[current.front()].second.device() != p.device());
    if (!current.empty() && (other_kind || static_cast<double>(current_bytes) >= cap)) {
      groups.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
    current.push_back(i);
    current_bytes += static_cast<size_t>(p.nbytes());
  }
  groups.push_back(std::move(current));

  for (const auto& members : groups) {
    State::Bucket bucket;
    int64_t total = 0;
    for (size_t i : members) total += trainable[i].second.numel();
    const Tensor& first = trainable[members.front()].second;
    bucket.flat = zeros({total}, {.dtype = first.dtype(), .device = first.device()});
    int64_t offset = 0;
    for (size_t i : members) {
      const auto& [name, p] = trainable[i];
      // The view takes the parameter's own strides (a channels_last weight gets a channels_last
      // gradient), so the gradient backward produces is copied in without a permute and the
      // optimizer's fused kernels, which need gradient and parameter in one layout, still apply.
      Tensor segment = bucket.flat.narrow(0, offset, p.numel());
      Tensor view = is_non_overlapping_and_dense(p.sizes(), p.strides())
                        ? segment.as_strided(p.sizes(), p.strides())
                        : segment.view(p.sizes());
      State::Slot slot{name, p, view, state_->buckets.size(), false};
      offset += p.numel();
      bucket.slots.push_back(state_->slots.size());
      state_->slots.push_back(std::move(slot));
    }
    state_->buckets.push_back(std::move(bucket));
  }

  for (size_t index = 0; index < state_->slots.size(); ++index) {
    state_->slots[index].param.register_post_accumulate_grad_hook(
        [weak = std::weak_ptr<State>(state_), index](const Tensor&) {
          if (auto state = weak.lock()) state->on_gradient(index);
        });
  }
}

DistributedDataParallel::~DistributedDataParallel() = default;

Tensor DistributedDataParallel::operator()(const Tensor& x) {
  return module_.forward(x);
}

namespace {

// Moves each buffer's memory into `flat` (same dtype and device, contiguous) by re-pointing its
// TensorImpl, so every handle to it (the module's member included) now reads and writes the
// flat tensor: BatchNorm keeps updating its statistics in place, and one broadcast of `flat`
// syncs them all with no copies per step.
void adopt_into(Tensor& flat, const std::vector<Tensor>& buffers) {
  int64_t offset = 0;
  for (const auto& b : buffers) {
    flat.narrow(0, offset, b.numel()).copy_(b.reshape({-1}));
    b.impl()->rebind(flat.storage(), flat.storage_offset() + offset, contiguous_strides(b.sizes()));
    offset += b.numel();
  }
}

}  // namespace

void DistributedDataParallel::broadcast_buffers() {
  for (auto& work : state_->start_buffer_broadcast()) work->wait();
}

std::vector<std::shared_ptr<Work>> DistributedDataParallel::State::start_buffer_broadcast() {
  NoGradGuard no_grad;
  // One flat tensor per (dtype, device) whose slices are the buffers themselves (adopt_into):
  // a single collective per dtype and nothing to copy. If the module replaced a buffer since
  // (module.to(...)), the group is adopted again.
  std::map<std::pair<int, std::string>, std::vector<Tensor>> groups;
  for (auto& [name, b] : module->named_buffers()) {
    if (b.defined() && b.numel() > 0) groups[{static_cast<int>(b.dtype()), b.device().str()}].push_back(b);
  }
  auto& flats = buffer_flats;
  std::vector<std::shared_ptr<Work>> works;
  for (auto& [key, buffers] : groups) {
    Tensor& flat = flats[key];
    int64_t total = 0;
    bool adopted = flat.defined();
    for (const auto& b : buffers) {
      total += b.numel();
      adopted = adopted && b.storage() == flat.storage();
    }
    if (!adopted || flat.numel() != total) {
      flat = Tensor::empty({total}, {.dtype = buffers.front().dtype(), .device = buffers.front().device()});
      adopt_into(flat, buffers);
    }
    works.push_back(group->broadcast(flat, 0));
  }
  return works;
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_layout() const {
  std::vector<std::vector<std::string>> layout;
  for (const auto& b : state_->buckets) {
    auto& names = layout.emplace_back();
    for (size_t i : b.slots) names.push_back(state_->slots[i].name);
  }
  return layout;
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp)
    : ddp_(ddp), previous_(ddp.state_->sync_enabled) {
  ddp.state_->sync_enabled = false;
}

DistributedDataParallel::NoSync::~NoSync() {
  ddp_.state_->sync_enabled = previous_;
}

std::function<void(Tensor&)> agree_found_inf(ProcessGroup& group) {
  return [&group](Tensor& flag) {
    // Flags are 0 (clean), positive (found) or NaN (found, by the scaler's fallback path): their
    // sum over ranks is 0 exactly when no rank found one, and NaN propagates. One collective on
    // the flag itself, no kernels around it.
    group.allreduce(flag, ReduceOp::sum)->wait();
  };
}

}  // namespace nabla::distributed
