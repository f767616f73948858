// DistributedDataParallel on the Gloo backend with real processes: averaged gradients equal the
// single-process gradient of the whole batch (float64, no BatchNorm), no_sync accumulation, the
// bucket layout, start-up broadcast, and the unused-parameter error.
#if defined(NABLA_HAS_GLOO)

#include <gtest/gtest.h>

#include "multiprocess.h"
#include "nabla/distributed/ddp.h"
#include "nabla/distributed/gloo/process_group_gloo.h"
#include "nabla/nn/checkpoint.h"
#include "test_util.h"

#include <limits>

namespace nabla::distributed {
namespace {

using testing::expect_all_succeeded;
using testing::run_ranks;

struct Mlp : nn::Module {
  nn::Linear fc1{{.in = 6, .out = 16}}, fc2{{.in = 16, .out = 16}}, fc3{{.in = 16, .out = 3}};
  nn::Linear spare{{.in = 3, .out = 3}};  // used only when `use_spare`
  bool use_spare = true;
  Mlp() { register_modules({{"fc1", fc1}, {"fc2", fc2}, {"fc3", fc3}, {"spare", spare}}); }
  Tensor forward(const Tensor& x) override {
    Tensor h = fc3(tanh(fc2(relu(fc1(x)))));
    return use_spare ? spare(h) : h;
  }
};

// The global batch: 4 rows per rank, the same on every rank (seeded).
std::pair<Tensor, Tensor> global_batch(uint64_t seed, int world) {
  Tensor x = nabla::testing::random_input({4 * world, 6}, seed, kFloat64);
  Tensor y = nabla::testing::random_input({4 * world, 3}, seed + 1, kFloat64);
  return {x, y};
}

Tensor mse(const Tensor& out, const Tensor& y) {
  return ((out - y) * (out - y)).mean();
}

void expect_same_grads(nn::Module& a, nn::Module& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    RANK_CHECK(pa[i].second.grad().defined(), "{} has no gradient", pa[i].first);
    auto ok = nabla::testing::all_close(pa[i].second.grad(), pb[i].second.grad(), 1e-10, 1e-12);
    RANK_CHECK(ok, "{}: {}", pa[i].first, ok.message());
  }
}

TEST(Ddp, AveragedGradientsEqualTheWholeBatchGradient) {
  const uint64_t seed = nabla::testing::test_seed();
  auto results = run_ranks(3, [seed](int rank, int world, Store& store) {
    ProcessGroupGloo group(store, rank, world, {.timeout = std::chrono::seconds(20)});
    manual_seed(seed + rank);  // different initial weights per rank: DDP must broadcast rank 0's
    Mlp model;
    model.to(kFloat64);
    // Tiny buckets: several allreduces per backward, launched while backward runs.
    DistributedDataParallel ddp(model, group, {.bucket_cap_mb = 0.0005, .first_bucket_cap_mb = 0.0002});
    RANK_CHECK(ddp.bucket_layout().size() >= 3, "expected several buckets, got {}",
               ddp.bucket_layout().size());
    RANK_CHECK(ddp.bucket_layout().front().front() == "spare.bias",
               "the first bucket starts with the last "
               "registered parameter, got {}",
               ddp.bucket_layout().front().front());

    Mlp reference;
    reference.to(kFloat64);
    reference.load_state_dict(model.state_dict());  // rank 0's weights, after the broadcast
    auto [x, y] = global_batch(seed, world);
    for (int step = 0; step < 2; ++step) {  // twice: the second reuses the bucket views
      model.zero_grad(step == 0);
      reference.zero_grad(step == 0);
      mse(ddp(x.slice(0, 4 * rank, 4 * rank + 4)), y.slice(0, 4 * rank, 4 * rank + 4)).backward();
      mse(reference(x), y).backward();
      expect_same_grads(model, reference);
    }
    // Weights really came from rank 0: every rank's fc1.weight sum equals rank 0's.
    Tensor w = model.fc1.weight.detach().clone();
    Tensor w0 = w.clone();
    group.broadcast(w0, 0)->wait();
    RANK_CHECK(nabla::testing::all_close(w, w0, 0, 0), "weights differ from rank 0's");
  });
  expect_all_succeeded(results);
}

TEST(Ddp, NoSyncAccumulatesThenAveragesOnce) {
  const uint64_t seed = nabla::testing::test_seed();
  auto results = run_ranks(2, [seed](int rank, int world, Store& store) {
    ProcessGroupGloo group(store, rank, world, {.timeout = std::chrono::seconds(20)});
    Mlp model;
    model.to(kFloat64);
    DistributedDataParallel ddp(model, group, {.bucket_cap_mb = 0.001, .first_bucket_cap_mb = 0.001});
    Mlp reference;
    reference.to(kFloat64);
    reference.load_state_dict(model.state_dict());
    // Two micro-batches per rank; the reference sees all four as the sum of their losses / 2.
    const auto batch = global_batch(seed, 2 * world);
    const Tensor &x = batch.first, &y = batch.second;
    auto micro = [&](int k) { return std::pair{x.slice(0, 4 * k, 4 * k + 4), y.slice(0, 4 * k, 4 * k + 4)}; };
    {
      auto guard = ddp.no_sync();
      auto [xa, ya] = micro(2 * rank);
      mse(ddp(xa), ya).backward();
      // Nothing was averaged yet: the local gradient differs from the other rank's.
      Tensor local = model.fc1.weight.grad().contiguous().reshape({-1});
      Tensor both = Tensor::empty({2 * local.numel()}, {.dtype = kFloat64});
      group.allgather(both, local)->wait();
      RANK_CHECK(!nabla::testing::all_close(both.slice(0, 0, local.numel()),
                                            both.slice(0, local.numel(), 2 * local.numel()), 1e-6, 0),
                 "no_sync gradients were averaged");
    }
    auto [xb, yb] = micro(2 * rank + 1);
    mse(ddp(xb), yb).backward();
    Tensor total;
    for (int k = 0; k < 2 * world; ++k) {
      auto [xk, yk] = micro(k);
      Tensor l = mse(reference(xk), yk) / static_cast<double>(world);
      total = total.defined() ? total + l : l;
    }
    total.backward();
    expect_same_grads(model, reference);
  });
  expect_all_succeeded(results);
}

TEST(Ddp, UnusedParameterIsAnErrorNamingIt) {
  auto results = run_ranks(2, [](int rank, int world, Store& store) {
    ProcessGroupGloo group(store, rank, world, {.timeout = std::chrono::seconds(20)});
    Mlp model;
    model.use_spare = false;
    DistributedDataParallel ddp(model, group);
    Tensor x = nabla::testing::random_input({4, 6}, 11 + rank, kFloat32);
    try {
      ddp(x).sum().backward();
    } catch (const Error& e) {
      std::string what = e.what();
      RANK_CHECK(what.find("spare.weight") != std::string::npos &&
                     what.find("find_unused_parameters") != std::string::npos,
                 "message: {}", what);
      return;
    }
    throw std::runtime_error("backward with an unused parameter should throw");
  });
  expect_all_succeeded(results);
}

TEST(Ddp, FindUnusedParametersAveragesWhatSomeRanksUsed) {
  auto results = run_ranks(2, [](int rank, int world, Store& store) {
    ProcessGroupGloo group(store, rank, world, {.timeout = std::chrono::seconds(20)});
    Mlp model;
    model.to(kFloat64);
    model.use_spare = rank == 0;  // only rank 0 uses `spare`
    DistributedDataParallel ddp(model, group, {.find_unused_parameters = true});
    Tensor x = nabla::testing::random_input({4, 6}, 5, kFloat64);  // same on both ranks
    ddp(x).sum().backward();
    // Rank 0's spare gradient is g; rank 1 contributes zeros: both now hold g / 2.
    Mlp solo;
    solo.to(kFloat64);
    solo.load_state_dict(model.state_dict());
    solo(x).sum().backward();
    auto ok =
        nabla::testing::all_close(model.spare.weight.grad(), solo.spare.weight.grad() * 0.5, 1e-12, 1e-12);
    RANK_CHECK(ok, "spare.weight: {}", ok.message());
  });
  expect_all_succeeded(results);
}

struct SmallBnNet : nn::Module {
  nn::Conv2d conv{{.in = 2, .out = 4, .kernel = 3, .padding = 1}};
  nn::BatchNorm2d bn{4};
  nn::Linear fc{{.in = 4, .out = 3}};
  SmallBnNet() { register_modules({{"conv", conv}, {"bn", bn}, {"fc", fc}}); }
  Tensor forward(const Tensor& x) override { return fc(relu(bn(conv(x))).mean({2, 3})); }
};

// Rank 0's running statistics reach every rank by the end of each backward, in the module's own
// tensors.
TEST(Ddp, BufferBroadcastSyncsBatchNormStatisticsInPlace) {
  auto results = run_ranks(2, [](int rank, int world, Store& store) {
    ProcessGroupGloo group(store, rank, world, {.timeout = std::chrono::seconds(20)});
    SmallBnNet model;
    DistributedDataParallel ddp(model, group);
    SmallBnNet local;  // the same forward without DDP: this rank's own statistics
    for (int step = 0; step < 3; ++step) {
      local.load_state_dict(model.state_dict());
      // Different data per rank: each forward moves the running statistics apart.
      Tensor x = nabla::testing::random_input({4, 2, 5, 5}, 100 * step + rank, kFloat32);
      ddp(x).sum().backward();
      local(x);
      Tensor both = Tensor::empty({8}, {.dtype = kFloat32});
      group.allgather(both, local.bn.running_mean)->wait();
      Tensor rank0 = both.slice(0, 0, 4);
      // The module's own tensors hold rank 0's values (they were re-pointed, not copied once).
      RANK_CHECK(nabla::testing::all_close(model.bn.running_mean, rank0, 0, 0), "step {}: not rank 0's",
                 step);
      if (step == 0 && rank == 1) {
        RANK_CHECK(!nabla::testing::all_close(local.bn.running_mean, rank0, 1e-6, 0),
                   "the ranks' statistics never differed");
      }
      ddp.broadcast_buffers();  // the explicit call agrees
      RANK_CHECK(nabla::testing::all_close(model.bn.running_mean, rank0, 0, 0), "step {}: changed", step);
    }
  });
  expect_all_succeeded(results);
}

// The same net with its BatchNorm inside a checkpointed segment: backward runs the segment's
// forward again, which updates the running statistics a second time.
struct CheckpointedBnNet : SmallBnNet {
  Tensor forward(const Tensor& x) override {
    Tensor h = nn::checkpoint([this](const Tensor& t) { return relu(bn(conv(t))); }, x);
    return fc(h.mean({2, 3}));
  }
};

// Statistics updated during backward (a checkpoint's recompute) are synced too: the broadcast
// goes out after the whole backward, so every rank ends the step with rank 0's final values.
TEST(Ddp, BufferBroadcastComesAfterCheckpointRecomputes) {
  auto results = run_ranks(2, [](int rank, int world, Store& store) {
    ProcessGroupGloo group(store, rank, world, {.timeout = std::chrono::seconds(20)});
    CheckpointedBnNet model;
    DistributedDataParallel ddp(model, group);
    for (int step = 0; step < 2; ++step) {
      Tensor x = nabla::testing::random_input({4, 2, 5, 5}, 10 * step + rank, kFloat32);
      x.requires_grad_(true);  // so the checkpointed segment records a backward node
      ddp(x).sum().backward();
      Tensor mine = model.bn.running_var.clone();
      Tensor both = Tensor::empty({8}, {.dtype = kFloat32});
      group.allgather(both, mine)->wait();
      RANK_CHECK(nabla::testing::all_close(both.slice(0, 0, 4), both.slice(0, 4, 8), 0, 0),
                 "step {}: ranks end the step with different running statistics", step);
    }
  });
  expect_all_succeeded(results);
}

struct SmallConvNet : nn::Module {
  nn::Conv2d conv{{.in = 3, .out = 4, .kernel = 3, .padding = 1}};
  nn::Linear fc{{.in = 4, .out = 2}};
  SmallConvNet() { register_modules({{"conv", conv}, {"fc", fc}}); }
  Tensor forward(const Tensor& x) override { return fc(tanh(conv(x)).mean({2, 3})); }
};

// A channels_last weight's bucket view is channels_last too: the gradient lands without a
// permute, and the fused optimizers (which need gradient and parameter in one layout) apply.
TEST(Ddp, ChannelsLastParametersGetChannelsLastGradientViews) {
  const uint64_t seed = nabla::testing::test_seed();
  auto results = run_ranks(2, [seed](int rank, int world, Store& store) {
    ProcessGroupGloo group(store, rank, world, {.timeout = std::chrono::seconds(20)});
    manual_seed(seed + rank);
    SmallConvNet model;
    model.to(kFloat64);
    model.to(MemoryFormat::ChannelsLast);
    RANK_CHECK(
        model.conv.weight.is_contiguous(MemoryFormat::ChannelsLast) && !model.conv.weight.is_contiguous(),
        "the weight is not channels_last to begin with");
    DistributedDataParallel ddp(model, group, {.bucket_cap_mb = 0.0002, .first_bucket_cap_mb = 0.0001});
    SmallConvNet reference;
    reference.to(kFloat64);
    reference.load_state_dict(model.state_dict());
    Tensor x = nabla::testing::random_input({2 * world, 3, 5, 5}, seed, kFloat64);
    Tensor y = nabla::testing::random_input({2 * world, 2}, seed + 1, kFloat64);
    for (int step = 0; step < 2; ++step) {  // set_to_none, then zeroed in place
      model.zero_grad(step == 0);
      reference.zero_grad(step == 0);
      Tensor part = x.slice(0, 2 * rank, 2 * rank + 2).contiguous(MemoryFormat::ChannelsLast);
      mse(ddp(part), y.slice(0, 2 * rank, 2 * rank + 2)).backward();
      mse(reference(x), y).backward();
      expect_same_grads(model, reference);
      const Tensor& g = model.conv.weight.grad();
      RANK_CHECK(g.strides() == model.conv.weight.strides(), "step {}: gradient strides {} vs weight {}",
                 step, shape_str(g.strides()), shape_str(model.conv.weight.strides()));
    }
  });
  expect_all_succeeded(results);
}

TEST(Ddp, GradScalerSkipsOnEveryRankWhenOneOverflows) {
  auto results = run_ranks(2, [](int rank, int world, Store& store) {
    ProcessGroupGloo group(store, rank, world, {.timeout = std::chrono::seconds(20)});
    Tensor w = full({4}, 1.0, {.dtype = kFloat32});
    w.requires_grad_(true);
    optim::SGD opt(std::vector<Tensor>{w}, {.lr = 0.5});
    amp::GradScaler scaler({.init_scale = 8.0, .reduce_found_inf = agree_found_inf(group)});
    // Only rank 1's gradient overflows; without agreement rank 0 alone would step.
    Tensor x = full({4}, rank == 1 ? std::numeric_limits<double>::infinity() : 1.0, {.dtype = kFloat32});
    scaler.scale((w * x).sum()).backward();
    scaler.step(opt);
    bool stepped = !scaler.found_inf();
    scaler.update();
    RANK_CHECK(!stepped, "rank {} stepped although rank 1 overflowed", rank);
    RANK_CHECK(scaler.get_scale() == 4.0, "scale {}", scaler.get_scale());
    RANK_CHECK(w.detach().to_vector<float>()[0] == 1.0f, "weights changed");
  });
  expect_all_succeeded(results);
}

}  // namespace
}  // namespace nabla::distributed

#endif  // NABLA_HAS_GLOO
