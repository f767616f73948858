// CUDA indexing and joining against the CPU backend: index_select, gather, index_add,
// scatter_add, cat and stack, for every dtype each supports, along every dim of inputs in six
// layouts, with strided indices, repeated indices (atomics), many collisions, out-of-range
// indices (checked before anything is written) and gradients.
#include "parity_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

// Int64 indices uniform in [0, bound).
Tensor random_index(const Shape& sizes, int64_t bound, uint64_t seed) {
  Generator gen(seed);
  return randint(0, bound, sizes, {.dtype = kInt64}, &gen);
}

// Accumulation order differs (atomics), so float32/64 sums may differ by a rounding or two.
Tolerance accumulate_tolerance(DType dtype) {
  if (dtype == kFloat32) return {1e-5, 1e-5};
  if (dtype == kFloat64) return {1e-12, 1e-12};
  return {0, 0};
}

// Values for the accumulating ops. float16/bfloat16 round every partial sum, so sums in a
// different order would differ by many ulps; multiples of 1/8 up to 2.5 instead add exactly
// (a dozen of them stay within bfloat16's 8 significant bits), in any order.
Tensor accumulation_values(const Shape& sizes, uint64_t seed, DType dtype) {
  if (!is_reduced_float(dtype)) return random_values(sizes, seed, dtype);
  return random_values(sizes, seed, kInt64).to(dtype) * 0.125;
}

TEST(CudaParityIndexing, IndexSelectMatchesTheCpuForEveryDtypeDimAndLayout) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (const Layout& layout : layouts_2345()) {
    for (DType dtype : kAllDTypes) {
      Pair x = make_pair(layout, ++seed, dtype);
      for (int64_t dim = 0; dim < 4; ++dim) {
        const int64_t size = x.cpu.size(dim);
        Tensor index = random_index({7}, size, ++seed);                        // with repeats
        Tensor strided = random_index({14}, size, ++seed).slice(0, 0, 14, 2);  // stride 2
        Tensor scalar = random_index({}, size, ++seed);                        // 0-d
        for (const Tensor& i : {index, strided, scalar}) {
          EXPECT_TRUE(matches_cpu(index_select(x.cuda, dim, to_cuda(i)), index_select(x.cpu, dim, i)))
              << context("index_select", dtype, layout.name) << " dim " << dim << " index "
              << shape_str(i.sizes());
        }
      }
    }
  }
}

TEST(CudaParityIndexing, EmbeddingSizedLookupsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  Tensor table = random_input({5000, 64}, test_seed(), kFloat32);
  Tensor index = random_index({32, 1000}, 5000, test_seed() + 1).view({32000});
  EXPECT_TRUE(matches_cpu(index_select(to_cuda(table), 0, to_cuda(index)), index_select(table, 0, index)));
  // The same lookup along the contiguous dim.
  Tensor columns = random_index({3000}, 64, test_seed() + 2);
  EXPECT_TRUE(
      matches_cpu(index_select(to_cuda(table), 1, to_cuda(columns)), index_select(table, 1, columns)));
}

TEST(CudaParityIndexing, GatherMatchesTheCpuForEveryDtypeDimAndLayout) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (const Layout& layout : layouts_2345()) {
    for (DType dtype : kAllDTypes) {
      Pair x = make_pair(layout, ++seed, dtype);
      for (int64_t dim = 0; dim < 4; ++dim) {
        // The index may be longer than x along dim and shorter elsewhere.
        Shape sizes{2, 2, 3, 4};
        sizes[dim] = 6;
        Tensor index = random_index(sizes, x.cpu.size(dim), ++seed);
        Tensor index_t = random_index({sizes[3], sizes[1], sizes[2], sizes[0]}, x.cpu.size(dim), ++seed)
                             .permute({3, 1, 2, 0});  // a permuted index
        for (const Tensor& i : {index, index_t}) {
          EXPECT_TRUE(matches_cpu(gather(x.cuda, dim, to_cuda(i)), gather(x.cpu, dim, i)))
              << context("gather", dtype, layout.name) << " dim " << dim;
        }
      }
    }
  }
}

TEST(CudaParityIndexing, IndexAddAccumulatesRepeatsLikeTheCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (const Layout& layout : layouts_2345()) {
    for (DType dtype : kNumericDTypes) {
      Tensor base = accumulation_values(layout.storage, ++seed, dtype);
      Pair x{layout.view(base), layout.view(to_cuda(base))};
      for (int64_t dim = 0; dim < 4; ++dim) {
        Shape sizes = x.cpu.sizes();
        sizes[dim] = 9;  // more entries than the dim: repeats are certain
        Tensor index = random_index({9}, x.cpu.size(dim), ++seed);
        Tensor source = accumulation_values(sizes, ++seed, dtype);
        Tensor got = index_add(x.cuda, dim, to_cuda(index), to_cuda(source));
        EXPECT_TRUE(matches_cpu(got, index_add(x.cpu, dim, index, source), accumulate_tolerance(dtype)))
            << context("index_add", dtype, layout.name) << " dim " << dim;
      }
    }
  }
}

// index_copy without repeats (which entry wins is unspecified on CUDA), in place and out of
// place, every dtype, layout and dim; the in-place write captured in a CUDA graph follows an
// index that changes between replays.
TEST(CudaParityIndexing, IndexCopyWritesSlicesLikeTheCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (const Layout& layout : layouts_2345()) {
    for (DType dtype : kAllDTypes) {
      Pair x = make_pair(layout, ++seed, dtype);
      for (int64_t dim = 0; dim < 4; ++dim) {
        Shape sizes = x.cpu.sizes();
        sizes[dim] = std::min<int64_t>(2, sizes[dim]);
        // Distinct indices: the first of a random permutation.
        Generator gen(++seed);
        const Tensor index = sort(rand({x.cpu.size(dim)}, {}, &gen)).second.narrow(0, 0, sizes[dim]);
        // A transposed source: its strides are not x's.
        Shape flipped(sizes.rbegin(), sizes.rend());
        const Tensor source = random_values(flipped, ++seed, dtype).permute({3, 2, 1, 0});
        const Tensor expected = index_copy(x.cpu, dim, index, source);
        EXPECT_TRUE(
            matches_cpu(index_copy(x.cuda, dim, to_cuda(index), to_cuda(source)), expected, Tolerance{0, 0}))
            << context("index_copy", dtype, layout.name) << " dim " << dim;
        Tensor target = x.cuda.clone();
        index_copy_(target, dim, to_cuda(index), to_cuda(source));
        EXPECT_TRUE(matches_cpu(target, expected, Tolerance{0, 0}))
            << context("index_copy_", dtype, layout.name);
      }
    }
  }
  Tensor cache = zeros({2, 6, 3}, {.device = Device::cuda(0)});
  Tensor position = zeros({1}, {.dtype = kInt64, .device = Device::cuda(0)});
  const Tensor row = randn({2, 1, 3}, {.device = Device::cuda(0)});
  cuda::synchronize();  // made on the default stream; captured and replayed on the side one
  cuda::StreamGuard side(cuda::stream_from_pool());
  cuda::Graph graph;
  graph.capture_begin();
  index_copy_(cache, 1, position, row * (position.to(kFloat32) + 1.0));
  position.add_(2.0);
  graph.capture_end();
  for (int replay = 0; replay < 3; ++replay) graph.replay();
  const Tensor expected = zeros({2, 6, 3});
  for (int64_t slot : {0, 2, 4}) expected.narrow(1, slot, 1).copy_(row.cpu() * static_cast<double>(slot + 1));
  EXPECT_TRUE(matches_cpu(cache, expected, Tolerance{1e-6, 1e-6}));
}

TEST(CudaParityIndexing, ScatterAddAccumulatesRepeatsLikeTheCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (const Layout& layout : layouts_2345()) {
    for (DType dtype : kNumericDTypes) {
      Tensor base = accumulation_values(layout.storage, ++seed, dtype);
      Pair x{layout.view(base), layout.view(to_cuda(base))};
      for (int64_t dim = 0; dim < 4; ++dim) {
        Shape sizes{2, 3, 4, 5};
        sizes[dim] = 8;
        Tensor index = random_index(sizes, x.cpu.size(dim), ++seed);
        Shape src_sizes = sizes;
        src_sizes[0] += 1;  // src may be larger than the index; the extra part is unused
        Tensor src = accumulation_values(src_sizes, ++seed, dtype);
        Tensor got = scatter_add(x.cuda, dim, to_cuda(index), to_cuda(src));
        EXPECT_TRUE(matches_cpu(got, scatter_add(x.cpu, dim, index, src), accumulate_tolerance(dtype)))
            << context("scatter_add", dtype, layout.name) << " dim " << dim;
      }
    }
  }
}

TEST(CudaParityIndexing, ManyCollisionsCountExactly) {
  SKIP_WITHOUT_GPU();
  // A million ones into a thousand bins: every bin's count is an exact integer in any order.
  Tensor index = random_index({1 << 20}, 1000, test_seed());
  for (DType dtype : {kFloat32, kFloat64, kInt64, kInt32}) {
    Tensor bins = zeros({1000}, {.dtype = dtype});
    Tensor ones_src = ones({1 << 20}, {.dtype = dtype});
    EXPECT_TRUE(matches_cpu(scatter_add(to_cuda(bins), 0, to_cuda(index), to_cuda(ones_src)),
                            scatter_add(bins, 0, index, ones_src)))
        << context("scatter_add counts", dtype);
    Tensor rows = ones({1 << 20, 1}, {.dtype = dtype});
    EXPECT_TRUE(matches_cpu(index_add(to_cuda(bins.view({1000, 1})), 0, to_cuda(index), to_cuda(rows)),
                            index_add(bins.view({1000, 1}), 0, index, rows)))
        << context("index_add counts", dtype);
  }
}

// Note [Checks on the device]: the kernels check indices without making the host wait; the error
// comes at the next wait, and meanwhile nothing outside a tensor is read or written.
TEST(CudaParityIndexing, OutOfRangeIndicesAreReportedAtTheNextWaitAndTouchNothingOutside) {
  SKIP_WITHOUT_GPU();
  Tensor x = to_cuda(random_input({4, 5}, test_seed(), kFloat32));
  const Tensor before = x.cpu();
  const Tensor too_large = to_cuda(tensor<int64_t>({0, 3, 5}));
  const Tensor negative = to_cuda(tensor<int64_t>({0, -1, 2}));
  Tensor selected = index_select(x, 1, too_large);  // no wait, so no error yet
  EXPECT_NABLA_ERROR(selected.cpu(), "index_select", "index 5 is out of range", "dim 1", "next wait");
  EXPECT_NO_THROW(selected.cpu());  // reported once
  // The bad column reads as zeros; the good ones are x's.
  const Tensor expected = cat({before.narrow(1, 0, 1), before.narrow(1, 3, 1), zeros({4, 1})}, 1);
  EXPECT_TRUE(matches_cpu(selected, expected, Tolerance{0, 0}));
  Tensor rows = index_select(x, 0, negative);
  EXPECT_NABLA_ERROR(cuda::synchronize(), "index -1 is out of range");
  EXPECT_NABLA_ERROR(gather(x, 0, to_cuda(tensor<int64_t>({4, 0}, {1, 2}))).cpu(), "gather", "index 4");
  const Tensor source = to_cuda(random_input({4, 3}, test_seed() + 1, kFloat32));
  Tensor added = index_add(x, 1, too_large, source);
  EXPECT_NABLA_ERROR(added.cpu(), "index_add", "out of range");
  // The in-range columns 0 and 3 got their sums; column 5 does not exist and nothing was written.
  Tensor expected_added = before.clone();
  expected_added.narrow(1, 0, 1).add_(source.cpu().narrow(1, 0, 1));
  expected_added.narrow(1, 3, 1).add_(source.cpu().narrow(1, 1, 1));
  EXPECT_TRUE(matches_cpu(added, expected_added, Tolerance{0, 0}));
  EXPECT_NABLA_ERROR(scatter_add(x, 0, to_cuda(tensor<int64_t>({-3}, {1, 1})), x).cpu(), "scatter_add",
                     "index -3");
  EXPECT_TRUE(matches_cpu(x, before, Tolerance{0, 0}));
  EXPECT_NABLA_ERROR(embedding(x, to_cuda(tensor<int64_t>({1, 9}))).cpu(), "embedding", "index 9", "< 4");
  // An empty index is fine and selects nothing.
  EXPECT_EQ(index_select(x, 0, to_cuda(Tensor::empty({0}, {.dtype = kInt64}))).sizes(), (Shape{0, 5}));
  EXPECT_NO_THROW(cuda::synchronize());
}

TEST(CudaParityIndexing, CatAndStackMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (const Layout& layout : layouts_2345()) {
    for (DType dtype : kAllDTypes) {
      Pair a = make_pair(layout, ++seed, dtype), b = make_pair(layout, ++seed, dtype);
      for (int64_t dim : {0, 1, 3, -2}) {
        EXPECT_TRUE(matches_cpu(cat({a.cuda, b.cuda, a.cuda}, dim), cat({a.cpu, b.cpu, a.cpu}, dim)))
            << context("cat", dtype, layout.name) << " dim " << dim;
        EXPECT_TRUE(matches_cpu(stack({a.cuda, b.cuda}, dim), stack({a.cpu, b.cpu}, dim)))
            << context("stack", dtype, layout.name) << " dim " << dim;
      }
    }
  }
  // Mixed dtypes promote, empty pieces add nothing, channels_last inputs keep their format.
  Tensor f = random_input({3, 4}, ++seed, kFloat32), h = random_input({3, 2}, ++seed, kFloat16);
  Tensor i = random_values({3, 5}, ++seed, kInt64), e = Tensor::empty({3, 0}, {.dtype = kFloat64});
  EXPECT_TRUE(matches_cpu(cat({to_cuda(f), to_cuda(h), to_cuda(i), to_cuda(e)}, 1), cat({f, h, i, e}, 1)));
  Tensor cl = random_input({2, 3, 4, 5}, ++seed, kFloat32).contiguous(MemoryFormat::ChannelsLast);
  Tensor joined = cat({to_cuda(cl), to_cuda(cl)}, 1);
  EXPECT_TRUE(joined.is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_TRUE(matches_cpu(joined, cat({cl, cl}, 1)));
}

TEST(CudaParityIndexing, GradientsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType dtype : {kFloat32, kFloat64}) {
    const Tolerance tol = accumulate_tolerance(dtype);
    Tensor x0 = random_input({6, 5, 4}, ++seed, dtype), s0 = random_input({6, 9, 4}, ++seed, dtype);
    Tensor index = random_index({9}, 5, ++seed), gidx = random_index({6, 3, 4}, 5, ++seed);
    auto check = [&](const char* what,
                     const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& op) {
      Tensor x = x0.detach().requires_grad_(true), s = s0.detach().requires_grad_(true);
      Tensor xd = to_cuda(x0).requires_grad_(true), sd = to_cuda(s0).requires_grad_(true);
      Tensor y = op(x, s, index);
      Tensor g = random_input(y.sizes(), seed + 7, dtype);
      y.backward(g);
      op(xd, sd, to_cuda(index)).backward(to_cuda(g));
      EXPECT_TRUE(matches_cpu(xd.grad(), x.grad(), tol)) << what << " grad x " << dtype_name(dtype);
      if (s.grad().defined()) {
        EXPECT_TRUE(matches_cpu(sd.grad(), s.grad(), tol)) << what << " grad source " << dtype_name(dtype);
      }
    };
    check("index_select", [](const Tensor& x, const Tensor& s, const Tensor& i) {
      return index_select(x, 1, i) + s.sum();  // s only to keep the lambda's shape
    });
    check("index_add",
          [](const Tensor& x, const Tensor& s, const Tensor& i) { return index_add(x, 1, i, s); });
    check("gather", [&](const Tensor& x, const Tensor& s, const Tensor&) {
      return gather(x, 1, gidx.to(x.device())) + s.sum();
    });
    check("scatter_add", [&](const Tensor& x, const Tensor& s, const Tensor&) {
      return scatter_add(x, 1, gidx.to(x.device()), s.narrow(1, 0, 3));
    });
    check("cat", [](const Tensor& x, const Tensor& s, const Tensor&) { return cat({x, s, x}, 1); });
  }
}

}  // namespace
}  // namespace nabla
