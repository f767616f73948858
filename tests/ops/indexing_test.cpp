// Joining, splitting and indexing: every op against a reference that walks positions of host
// doubles by definition, on strided and channels_last inputs and in several dtypes; float64
// gradchecks for each differentiable op; and the errors for bad shapes, dtypes and indices.
#include "test_util.h"

namespace nabla {
namespace {

using testing::all_close;
using testing::random_input;
using testing::test_seed;

int64_t linear_index(const Shape& sizes, const Shape& pos) {
  int64_t i = 0;
  for (size_t d = 0; d < sizes.size(); ++d) i = i * sizes[d] + pos[d];
  return i;
}

// Every position of `sizes`, in row-major order.
std::vector<Shape> positions(const Shape& sizes) {
  std::vector<Shape> out;
  if (numel_of(sizes) == 0) return out;
  Shape pos(sizes.size(), 0);
  while (true) {
    out.push_back(pos);
    int64_t d = static_cast<int64_t>(sizes.size()) - 1;
    for (; d >= 0; --d) {
      if (++pos[d] < sizes[d]) break;
      pos[d] = 0;
    }
    if (d < 0) return out;
  }
}

std::vector<double> values(const Tensor& t) {
  return t.to(kFloat64).to_vector<double>();
}

Tensor random_index(const Shape& sizes, int64_t high, uint64_t seed) {
  Generator gen(seed);
  return randint(0, high, sizes, {.dtype = kInt64}, &gen);
}

Tensor reference_cat(const TensorList& tensors, int64_t d) {
  Shape sizes = tensors[0].sizes();
  sizes[d] = 0;
  std::vector<std::vector<double>> in;
  for (const Tensor& t : tensors) {
    sizes[d] += t.size(d);
    in.push_back(values(t));
  }
  std::vector<double> out(static_cast<size_t>(numel_of(sizes)));
  for (const Shape& pos : positions(sizes)) {
    Shape local = pos;
    size_t i = 0;
    while (local[d] >= tensors[i].size(d)) local[d] -= tensors[i++].size(d);
    out[linear_index(sizes, pos)] = in[i][linear_index(tensors[i].sizes(), local)];
  }
  return tensor<double>(out, sizes);
}

// out[p] = x[p with p[d] = index[p[d]]] (index_select), or index[p] (gather).
Tensor reference_select(const Tensor& x, int64_t d, const Tensor& index, bool gather) {
  Shape sizes = x.sizes();
  if (gather) {
    sizes = index.sizes();
  } else {
    sizes[d] = index.numel();
  }
  std::vector<double> xv = values(x), out(static_cast<size_t>(numel_of(sizes)));
  std::vector<int64_t> iv = index.to_vector<int64_t>();
  for (const Shape& pos : positions(sizes)) {
    Shape src = pos;
    src[d] = iv[gather ? linear_index(sizes, pos) : pos[d]];
    out[linear_index(sizes, pos)] = xv[linear_index(x.sizes(), src)];
  }
  return tensor<double>(out, sizes);
}

// x with source[p] added at p with p[d] = index[p[d]] (index_add) or index[p] (scatter_add), over
// every position p of source (index_add) or of index (scatter_add).
Tensor reference_add(const Tensor& x, int64_t d, const Tensor& index, const Tensor& source, bool scatter) {
  std::vector<double> out = values(x), sv = values(source);
  std::vector<int64_t> iv = index.to_vector<int64_t>();
  for (const Shape& pos : positions(scatter ? index.sizes() : source.sizes())) {
    Shape dst = pos;
    dst[d] = iv[scatter ? linear_index(index.sizes(), pos) : pos[d]];
    out[linear_index(x.sizes(), dst)] += sv[linear_index(source.sizes(), pos)];
  }
  return tensor<double>(out, x.sizes());
}

TEST(Indexing, CatJoinsTensorsAlongTheDimInOrder) {
  uint64_t seed = test_seed();
  std::vector<std::pair<TensorList, int64_t>> cases = {
      {{random_input({2, 3}, ++seed), random_input({2, 1}, ++seed), random_input({2, 4}, ++seed)}, 1},
      {{random_input({2, 3}, ++seed), random_input({2, 1}, ++seed)}, -1},
      {{random_input({2, 3}, ++seed), random_input({4, 3}, ++seed)}, 0},
      {{random_input({2, 3, 4}, ++seed), random_input({2, 4, 2}, ++seed).transpose(1, 2),
        random_input({2, 0, 4}, ++seed)},
       1},
      {{random_input({3}, ++seed)}, 0},
  };
  for (const auto& [tensors, dim] : cases) {
    Tensor out = cat(tensors, dim);
    const int64_t d = dim < 0 ? dim + tensors[0].dim() : dim;
    EXPECT_TRUE(all_close(out, reference_cat(tensors, d), 0, 0)) << "dim " << dim;
    EXPECT_TRUE(out.is_contiguous());
  }
}

TEST(Indexing, CatPromotesMixedDtypes) {
  uint64_t seed = test_seed();
  Tensor f32 = random_input({2, 2}, ++seed, kFloat32), f64 = random_input({1, 2}, ++seed, kFloat64);
  Tensor i64 = arange(4, {.dtype = kInt64}).view({2, 2});
  Tensor f16 = random_input({1, 2}, ++seed, kFloat16), bf16 = random_input({1, 2}, ++seed, kBFloat16);
  Tensor a = cat({f32, f64});
  EXPECT_EQ(a.dtype(), kFloat64);
  EXPECT_TRUE(all_close(a, reference_cat({f32, f64}, 0), 0, 0));
  Tensor b = cat({i64, f32}, 1);
  EXPECT_EQ(b.dtype(), kFloat32);
  EXPECT_TRUE(all_close(b, reference_cat({i64, f32}, 1), 0, 0));
  Tensor c = cat({f16, bf16});
  EXPECT_EQ(c.dtype(), kFloat32);
  EXPECT_TRUE(all_close(c, reference_cat({f16, bf16}, 0), 0, 0));
}

TEST(Indexing, CatKeepsChannelsLastOnlyWhenEveryInputIsChannelsLast) {
  uint64_t seed = test_seed();
  Tensor a = random_input({2, 3, 4, 5}, ++seed, kFloat32).contiguous(MemoryFormat::ChannelsLast);
  Tensor b = random_input({2, 2, 4, 5}, ++seed, kFloat32).contiguous(MemoryFormat::ChannelsLast);
  Tensor both = cat({a, b}, 1);
  EXPECT_EQ(both.suggest_memory_format(), MemoryFormat::ChannelsLast);
  EXPECT_TRUE(all_close(both, reference_cat({a, b}, 1), 0, 0));
  Tensor batch = cat({a, a}, 0);
  EXPECT_EQ(batch.suggest_memory_format(), MemoryFormat::ChannelsLast);
  EXPECT_TRUE(all_close(batch, reference_cat({a, a}, 0), 0, 0));
  Tensor mixed = cat({a, b.contiguous()}, 1);
  EXPECT_TRUE(mixed.is_contiguous());
  EXPECT_TRUE(all_close(mixed, reference_cat({a, b}, 1), 0, 0));
}

TEST(Indexing, CatRejectsMismatchedInputsNamingThem) {
  Tensor a = random_input({2, 3}, 1), b = random_input({3, 3}, 2);
  EXPECT_NABLA_ERROR(cat({a, b}, 1), "cat", "except in dim 1", "[2, 3]", "[3, 3]", "tensor #1");
  EXPECT_NABLA_ERROR(cat({a, random_input({0}, 3)}, 0), "cat", "2 dims", "[0]");
  EXPECT_NABLA_ERROR(cat({}, 0), "cat", "non-empty");
  EXPECT_NABLA_ERROR(cat({a, a}, 2), "cat", "dim 2");
  EXPECT_NABLA_ERROR(cat({random_input({4}, 4).sum(), a}, 0), "cat", "zero-dimensional");
  EXPECT_NABLA_ERROR(cat({a, Tensor()}, 0), "cat", "tensor #1 is undefined");
}

TEST(Indexing, StackAddsANewDimAtAnyPosition) {
  uint64_t seed = test_seed();
  TensorList parts = {random_input({2, 3}, ++seed), random_input({2, 3}, ++seed),
                      random_input({2, 3}, ++seed)};
  std::vector<std::vector<double>> pv;
  for (const Tensor& p : parts) pv.push_back(values(p));
  for (int64_t dim : {0, 1, 2, -1}) {
    Tensor out = stack(parts, dim);
    const int64_t d = dim < 0 ? dim + 3 : dim;
    Shape expected_sizes = {2, 3};
    expected_sizes.insert(expected_sizes.begin() + d, 3);
    ASSERT_EQ(out.sizes(), expected_sizes);
    std::vector<double> ov = values(out);
    for (const Shape& pos : positions(expected_sizes)) {
      Shape inner = pos;
      inner.erase(inner.begin() + d);
      EXPECT_EQ(ov[linear_index(expected_sizes, pos)], pv[pos[d]][linear_index({2, 3}, inner)]);
    }
  }
  EXPECT_NABLA_ERROR(stack({parts[0], random_input({3, 2}, 1)}, 0), "stack", "one shape", "[2, 3]", "[3, 2]");
}

TEST(Indexing, SplitAndChunkReturnViewsCoveringTheDim) {
  Tensor x = random_input({7, 3}, test_seed());
  auto sizes_along = [](const TensorList& parts, int64_t d) {
    Shape s;
    for (const Tensor& p : parts) s.push_back(p.size(d));
    return s;
  };
  TensorList by3 = split(x, 3, 0);
  EXPECT_EQ(sizes_along(by3, 0), (Shape{3, 3, 1}));
  for (const Tensor& p : by3) EXPECT_EQ(p.storage().get(), x.storage().get());
  EXPECT_TRUE(all_close(cat(by3, 0), x, 0, 0));
  // The last row of x is the one-row piece.
  const std::vector<double> xv = values(x);
  EXPECT_EQ(values(by3[2]), std::vector<double>(xv.end() - 3, xv.end()));
  EXPECT_EQ(sizes_along(chunk(x, 3, 0), 0), (Shape{3, 3, 1}));
  EXPECT_EQ(sizes_along(chunk(x, 2, 1), 1), (Shape{2, 1}));
  EXPECT_EQ(sizes_along(chunk(x.narrow(0, 0, 6), 4, 0), 0), (Shape{2, 2, 2}));  // fewer pieces than asked
  TensorList uneven = split_with_sizes(x, {1, 4, 2}, 0);
  EXPECT_EQ(sizes_along(uneven, 0), (Shape{1, 4, 2}));
  EXPECT_TRUE(all_close(cat(uneven, 0), x, 0, 0));
  Tensor empty_rows = zeros({0, 3});
  EXPECT_EQ(chunk(empty_rows, 3, 0).size(), 3u);
  EXPECT_EQ(split(empty_rows, 2, 0).size(), 1u);
  EXPECT_NABLA_ERROR(split(x, 0, 0), "split", "positive split_size");
  EXPECT_NABLA_ERROR(split_with_sizes(x, {1, 4, 1}, 0), "split_with_sizes", "sum to 6", "size 7");
  EXPECT_NABLA_ERROR(chunk(x, 0, 0), "chunk", "positive number of chunks");
}

TEST(Indexing, IndexSelectPicksSlicesInIndexOrderWithRepeats) {
  uint64_t seed = test_seed();
  Tensor x = random_input({5, 4}, ++seed);
  Tensor rows = tensor<int64_t>({4, 0, 4, 2});
  EXPECT_TRUE(all_close(index_select(x, 0, rows), reference_select(x, 0, rows, false), 0, 0));
  Tensor cols = tensor<int64_t>({3, 3, 0});
  EXPECT_TRUE(all_close(index_select(x, 1, cols), reference_select(x, 1, cols, false), 0, 0));
  EXPECT_TRUE(all_close(index_select(x, -1, cols), reference_select(x, 1, cols, false), 0, 0));
  Tensor xt = random_input({4, 5}, ++seed).t();  // (5, 4), non-contiguous
  EXPECT_TRUE(all_close(index_select(xt, 0, rows), reference_select(xt, 0, rows, false), 0, 0));
  Tensor x3 = random_input({3, 5, 2}, ++seed);
  Tensor idx = random_index({7}, 5, ++seed);
  EXPECT_TRUE(all_close(index_select(x3, 1, idx), reference_select(x3, 1, idx, false), 0, 0));
  // A strided index and a non-float dtype.
  Tensor strided_idx = random_index({8}, 5, ++seed).slice(0, 0, 8, 2);
  Tensor xi = random_index({5, 3}, 100, ++seed).to(kInt32);
  Tensor got = index_select(xi, 0, strided_idx);
  EXPECT_EQ(got.dtype(), kInt32);
  EXPECT_TRUE(all_close(got, reference_select(xi, 0, strided_idx, false), 0, 0));
  Tensor xh = random_input({5, 3}, ++seed, kFloat16);
  EXPECT_TRUE(all_close(index_select(xh, 0, rows), reference_select(xh, 0, rows, false), 0, 0));
}

TEST(Indexing, GatherReadsAlongTheDimAtEveryIndexPosition) {
  uint64_t seed = test_seed();
  struct Case {
    Shape x, index;
    int64_t dim;
  };
  for (const auto& [xs, is, dim] : std::vector<Case>{{{3, 5}, {3, 4}, 1},
                                                     {{3, 5}, {2, 5}, 0},
                                                     {{4, 6}, {2, 3}, 1},  // index smaller than x elsewhere
                                                     {{2, 3, 4}, {2, 3, 5}, 2},
                                                     {{2, 3, 4}, {2, 6, 1}, 1}}) {
    Tensor x = random_input(xs, ++seed);
    Tensor index = random_index(is, xs[dim], ++seed);
    EXPECT_TRUE(all_close(gather(x, dim, index), reference_select(x, dim, index, true), 0, 0))
        << shape_str(xs);
  }
  // Transposed x and index.
  Tensor xt = random_input({5, 3}, ++seed).t();
  Tensor it = random_index({4, 3}, 5, ++seed).t();
  EXPECT_TRUE(all_close(gather(xt, 1, it), reference_select(xt, 1, it, true), 0, 0));
}

TEST(Indexing, IndexAddAccumulatesRepeatedIndicesOutOfPlace) {
  uint64_t seed = test_seed();
  Tensor x = random_input({5, 3}, ++seed);
  Tensor before = x.clone();
  Tensor rows = tensor<int64_t>({1, 3, 1, 1});
  Tensor source = random_input({4, 3}, ++seed);
  EXPECT_TRUE(
      all_close(index_add(x, 0, rows, source), reference_add(x, 0, rows, source, false), 1e-15, 1e-15));
  EXPECT_TRUE(all_close(x, before, 0, 0));  // x is untouched
  Tensor cols = tensor<int64_t>({2, 2});
  Tensor source_t = random_input({2, 5}, ++seed).t();  // (5, 2), non-contiguous
  EXPECT_TRUE(
      all_close(index_add(x, 1, cols, source_t), reference_add(x, 1, cols, source_t, false), 1e-15, 1e-15));
  Tensor xh = random_input({5, 3}, ++seed, kFloat16), sh = random_input({4, 3}, ++seed, kFloat16);
  EXPECT_TRUE(all_close(index_add(xh, 0, rows, sh), reference_add(xh, 0, rows, sh, false), 5e-3, 5e-3));
}

// x with source's slices written at index along d: x.select(d, index[i]) = source.select(d, i),
// later entries winning.
Tensor reference_copy(const Tensor& x, int64_t d, const Tensor& index, const Tensor& source) {
  std::vector<double> out = values(x), sv = values(source);
  std::vector<int64_t> iv = index.to_vector<int64_t>();
  for (const Shape& pos : positions(source.sizes())) {
    Shape dst = pos;
    dst[d] = iv[pos[d]];
    out[linear_index(x.sizes(), dst)] = sv[linear_index(source.sizes(), pos)];
  }
  return tensor<double>(out, x.sizes());
}

TEST(Indexing, IndexCopyWritesSlicesOutOfPlaceAndInPlace) {
  uint64_t seed = test_seed();
  Tensor x = random_input({5, 3, 4}, ++seed);
  const Tensor before = x.clone();
  const Tensor rows = tensor<int64_t>({4, 0, 2});
  const Tensor source = random_input({3, 3, 4}, ++seed);
  EXPECT_TRUE(all_close(index_copy(x, 0, rows, source), reference_copy(x, 0, rows, source), 0, 0));
  EXPECT_TRUE(all_close(x, before, 0, 0));  // out of place: x untouched
  // Along a middle dim, into a transposed x, from a non-contiguous source, in place.
  Tensor xt = random_input({4, 3, 5}, ++seed).transpose(0, 2);            // (5, 3, 4)
  const Tensor source_t = random_input({2, 3, 5}, seed).transpose(0, 2);  // (5, 3, 2)
  const Tensor expected = reference_copy(xt, 2, tensor<int64_t>({3, 1}), source_t);
  const void* data = xt.data_ptr();
  index_copy_(xt, -1, tensor<int64_t>({3, 1}), source_t);
  EXPECT_EQ(xt.data_ptr(), data);
  EXPECT_TRUE(all_close(xt, expected, 0, 0));
  // A 0-d index, int64 and float16 elements; repeated entries: the last one's slice stays.
  Tensor xi = random_index({4, 2}, 100, ++seed);
  const Tensor si = random_index({1, 2}, 100, ++seed);
  EXPECT_TRUE(all_close(index_copy(xi, 0, tensor<int64_t>(std::vector<int64_t>{2}, {}), si),
                        reference_copy(xi, 0, tensor<int64_t>({2}), si), 0, 0));
  const Tensor xh = random_input({4, 2}, ++seed, kFloat16), sh = random_input({3, 2}, ++seed, kFloat16);
  const Tensor twice = tensor<int64_t>({1, 3, 1});
  EXPECT_TRUE(all_close(index_copy(xh, 0, twice, sh), reference_copy(xh, 0, twice, sh), 0, 0));
}

TEST(Indexing, IndexCopyGradientsPassGradcheck) {
  uint64_t seed = test_seed();
  const Tensor x = random_input({4, 3}, ++seed, kFloat64, true);
  const Tensor source = random_input({4, 2}, ++seed, kFloat64, true);
  const Tensor cols = tensor<int64_t>({2, 0});
  auto out_of_place =
      gradcheck([&](const TensorList& in) { return index_copy(in[0], 1, cols, in[1]) * 3.0; }, {x, source});
  EXPECT_TRUE(out_of_place) << out_of_place.message;
  // In place on a non-leaf: x's history is rebased onto the copy.
  auto in_place = gradcheck(
      [&](const TensorList& in) {
        Tensor y = in[0] * 2.0;
        index_copy_(y, 1, cols, sin(in[1]));
        return y;
      },
      {x, source});
  EXPECT_TRUE(in_place) << in_place.message;
  Tensor leaf = random_input({4, 3}, ++seed, kFloat64, true);
  EXPECT_NABLA_ERROR(index_copy_(leaf, 1, cols, source), "index_copy_", "leaf");
  Tensor plain = random_input({4, 3}, ++seed);
  Tensor expanded = random_input({4, 1}, ++seed).expand({4, 3});
  EXPECT_NABLA_ERROR(index_copy_(expanded, 1, cols, random_input({4, 2}, 1)), "stride 0");
  EXPECT_NABLA_ERROR(index_copy_(plain, 1, cols, plain.narrow(1, 0, 2)), "shares x's memory");
}

TEST(Indexing, ScatterAddAccumulatesAtEveryIndexPosition) {
  uint64_t seed = test_seed();
  Tensor x = random_input({3, 5}, ++seed);
  Tensor index = random_index({3, 4}, 5, ++seed);  // 4 draws from 5 slots: repeats likely
  Tensor src = random_input({3, 4}, ++seed);
  EXPECT_TRUE(all_close(scatter_add(x, 1, index, src), reference_add(x, 1, index, src, true), 1e-15, 1e-15));
  // src larger than index: only its leading block is used.
  Tensor big_src = random_input({4, 6}, ++seed);
  EXPECT_TRUE(
      all_close(scatter_add(x, 1, index, big_src), reference_add(x, 1, index, big_src, true), 1e-15, 1e-15));
  Tensor index0 = random_index({6, 5}, 3, ++seed);
  Tensor src0 = random_input({5, 6}, ++seed).t();  // (6, 5), non-contiguous
  EXPECT_TRUE(
      all_close(scatter_add(x, 0, index0, src0), reference_add(x, 0, index0, src0, true), 1e-14, 1e-14));
  Tensor xi = random_index({3, 5}, 10, ++seed);
  Tensor si = random_index({3, 4}, 10, ++seed);
  EXPECT_TRUE(all_close(scatter_add(xi, 1, index, si), reference_add(xi, 1, index, si, true), 0, 0));
}

TEST(Indexing, LargeInputsTakeTheThreadedPathsWithTheSameResults) {
  uint64_t seed = test_seed();
  Tensor table = random_input({1000, 8}, ++seed);
  Tensor lookups = random_index({10000}, 1000, ++seed);
  EXPECT_TRUE(all_close(index_select(table, 0, lookups), reference_select(table, 0, lookups, false), 0, 0));
  Tensor x = random_input({40000, 3}, ++seed);
  Tensor index = random_index({40000, 5}, 3, ++seed);
  Tensor src = random_input({40000, 5}, ++seed);
  EXPECT_TRUE(all_close(gather(x, 1, index), reference_select(x, 1, index, true), 0, 0));
  EXPECT_TRUE(all_close(scatter_add(x, 1, index, src), reference_add(x, 1, index, src, true), 1e-14, 1e-14));
  Tensor wide = random_input({50, 40000}, ++seed);
  Tensor rows = random_index({60}, 50, ++seed);
  Tensor source = random_input({60, 40000}, ++seed);
  EXPECT_TRUE(
      all_close(index_add(wide, 0, rows, source), reference_add(wide, 0, rows, source, false), 1e-14, 1e-14));
}

TEST(Indexing, OutOfRangeIndicesAreRejectedNamingTheValueAndRange) {
  Tensor x = random_input({5, 3}, test_seed());
  EXPECT_NABLA_ERROR(index_select(x, 0, tensor<int64_t>({0, 5})), "index_select", "index 5",
                     "0 <= index < 5");
  EXPECT_NABLA_ERROR(index_select(x, 1, tensor<int64_t>({-1})), "index_select", "index -1", "0 <= index < 3");
  EXPECT_NABLA_ERROR(gather(x, 1, tensor<int64_t>({0, 3}, {1, 2})), "gather", "index 3", "0 <= index < 3");
  EXPECT_NABLA_ERROR(index_add(x, 0, tensor<int64_t>({7}), random_input({1, 3}, 1)), "index_add", "index 7",
                     "0 <= index < 5");
  EXPECT_NABLA_ERROR(scatter_add(x, 0, tensor<int64_t>({9}, {1, 1}), random_input({1, 1}, 1)), "scatter_add",
                     "index 9", "0 <= index < 5");
  EXPECT_NABLA_ERROR(index_copy(x, 0, tensor<int64_t>({5}), random_input({1, 3}, 1)), "index_copy", "index 5",
                     "0 <= index < 5");
}

TEST(Indexing, IndexTensorsMustBeInt64AndShapesMustFit) {
  Tensor x = random_input({5, 3}, test_seed());
  EXPECT_NABLA_ERROR(index_select(x, 0, tensor<int32_t>({0, 1})), "index_select", "int64", "int32");
  EXPECT_NABLA_ERROR(gather(x, 0, random_input({2, 3}, 1)), "gather", "int64", "float64");
  EXPECT_NABLA_ERROR(index_select(x, 0, tensor<int64_t>({0, 1}, {1, 2})), "index_select", "1-d");
  EXPECT_NABLA_ERROR(gather(x, 0, tensor<int64_t>({0, 1})), "gather", "2 dims");
  EXPECT_NABLA_ERROR(gather(x, 0, tensor<int64_t>({0, 0, 0, 0}, {1, 4})), "gather", "larger than x", "dim 1");
  EXPECT_NABLA_ERROR(index_add(x, 0, tensor<int64_t>({0}), random_input({1, 4}, 1)), "index_add", "[1, 3]",
                     "[1, 4]");
  EXPECT_NABLA_ERROR(index_add(x, 0, tensor<int64_t>({0}), random_input({1, 3}, 1, kFloat32)), "index_add",
                     "dtype");
  EXPECT_NABLA_ERROR(scatter_add(x, 0, tensor<int64_t>({0, 0}, {2, 1}), random_input({1, 1}, 1)),
                     "scatter_add", "larger than src");
  EXPECT_NABLA_ERROR(index_copy(x, 1, tensor<int64_t>({0}), random_input({5, 2}, 1)), "index_copy", "[5, 1]",
                     "[5, 2]");
  Tensor target = x.clone();
  EXPECT_NABLA_ERROR(index_copy_(target, 0, tensor<int64_t>({0}), random_input({1, 3}, 1, kFloat32)),
                     "index_copy_", "dtype");
}

TEST(Indexing, CatStackSplitAndChunkGradientsPassGradcheck) {
  uint64_t seed = test_seed();
  Tensor a = random_input({3, 2}, ++seed).t();  // (2, 3) non-contiguous leaf
  a.requires_grad_(true);
  Tensor b = random_input({2, 1}, ++seed, kFloat64, true);
  Tensor c = random_input({2, 2}, ++seed);  // needs no grad
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return cat({in[0], c, in[1]}, 1); }, {a, b}));
  EXPECT_TRUE(gradcheck(
      [](const TensorList& in) {
        return cat({in[0], in[1].t()}, 0);
      },
      {a, random_input({3, 1}, ++seed, kFloat64, true)}));

  Tensor cl_a = random_input({2, 3, 2, 2}, ++seed).contiguous(MemoryFormat::ChannelsLast);
  Tensor cl_b = random_input({2, 1, 2, 2}, ++seed).contiguous(MemoryFormat::ChannelsLast);
  cl_a.requires_grad_(true);
  cl_b.requires_grad_(true);
  auto cl = gradcheck([](const TensorList& in) { return cat({in[0], in[1]}, 1) * 3.0; }, {cl_a, cl_b});
  EXPECT_TRUE(cl) << cl.message;

  Tensor s = random_input({2, 3}, ++seed, kFloat64, true);
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return stack({in[0], in[1] * 2.0, in[0]}, 1); }, {s, a}));

  Tensor x = random_input({3, 5}, ++seed, kFloat64, true);
  auto by_split = gradcheck(
      [](const TensorList& in) {
        TensorList parts = split(in[0], 2, 1);  // widths 2, 2, 1
        return cat({parts[2], parts[0] * 2.0, parts[1] * parts[1]}, 1);
      },
      {x});
  EXPECT_TRUE(by_split) << by_split.message;
  Tensor y = random_input({6, 2}, ++seed, kFloat64, true);
  auto by_chunk = gradcheck(
      [](const TensorList& in) {
        TensorList parts = chunk(in[0], 3, 0);  // three (2, 2) views
        return parts[0] * parts[1] + parts[2];
      },
      {y});
  EXPECT_TRUE(by_chunk) << by_chunk.message;
  auto by_sizes = gradcheck(
      [](const TensorList& in) {
        TensorList parts = split_with_sizes(in[0], {1, 3, 2}, 0);
        return cat({parts[1], parts[0], parts[2]}, 0) * 0.5;
      },
      {y});
  EXPECT_TRUE(by_sizes) << by_sizes.message;
}

// Three (2, 4, 3) "heads" whose backward writes all three gradients into one (2, 4, 9) buffer
// and returns them as its pieces: what the fused attention backward does for q, k and v.
struct ThreeFromOne : autograd::Function<ThreeFromOne> {
  static inline const void* buffer = nullptr;  // where the last backward wrote
  static Tensor forward(autograd::Context&, const Tensor& a, const Tensor& b, const Tensor& c) {
    return a * b + c;
  }
  static TensorList backward(autograd::Context&, const TensorList& grads) {
    const Tensor g = grads[0];
    const Tensor joined = cat({g * 2.0, g * 3.0, g * 4.0}, 2);  // (2, 4, 9)
    buffer = joined.data_ptr();
    return chunk(joined, 3, 2);
  }
};

TEST(Indexing, SplitHasOneBackwardNodeAndTakesPiecesThatLieSideBySideAsTheyAre) {
  // Note [Split backward]: the pieces' gradients are written into x's gradient once; pieces with
  // no gradient count as zeros.
  const Tensor x = random_input({4, 9}, test_seed(), kFloat64, true);
  TensorList parts = chunk(x, 3, 1);
  EXPECT_EQ(parts[0].grad_fn().get(), parts[2].grad_fn().get()) << "one node for every piece";
  (parts[0] * 2.0 + parts[2] * parts[2]).sum().backward();
  const Tensor xd = x.detach();
  const Tensor expected = cat(
      {full({4, 3}, 2.0, {.dtype = kFloat64}), zeros({4, 3}, {.dtype = kFloat64}), 2.0 * xd.narrow(1, 6, 3)},
      1);
  EXPECT_TRUE(all_close(x.grad(), expected, 1e-12));

  // Gradients already side by side in one buffer become x's gradient without a copy.
  const Tensor qkv = random_input({2, 4, 9}, test_seed() + 1, kFloat64, true);
  TensorList heads = chunk(qkv, 3, 2);
  ThreeFromOne::apply(heads[0], heads[1], heads[2]).sum().backward();
  const auto filled = [](double v) { return full({2, 4, 3}, v, {.dtype = kFloat64}); };
  EXPECT_TRUE(all_close(qkv.grad(), cat({filled(2.0), filled(3.0), filled(4.0)}, 2), 1e-12));
  EXPECT_EQ(qkv.grad().data_ptr(), ThreeFromOne::buffer) << "the buffer itself, not a copy";
}

TEST(Indexing, IndexingGradientsPassGradcheck) {
  uint64_t seed = test_seed();
  Tensor x = random_input({5, 3}, ++seed, kFloat64, true);
  Tensor xt = random_input({3, 5}, ++seed).t();  // (5, 3) non-contiguous leaf
  xt.requires_grad_(true);
  Tensor repeated = tensor<int64_t>({4, 0, 4, 2, 4});
  for (const Tensor& input : {x, xt}) {
    auto rows = gradcheck([&](const TensorList& in) { return index_select(in[0], 0, repeated); }, {input});
    EXPECT_TRUE(rows) << rows.message;
    Tensor cols = tensor<int64_t>({2, 2, 0});
    auto by_cols = gradcheck([&](const TensorList& in) { return index_select(in[0], 1, cols); }, {input});
    EXPECT_TRUE(by_cols) << by_cols.message;
    Tensor index = random_index({5, 4}, 3, ++seed);  // repeats along dim 1
    auto gathered = gradcheck([&](const TensorList& in) { return gather(in[0], 1, index); }, {input});
    EXPECT_TRUE(gathered) << gathered.message;
  }
  Tensor source = random_input({5, 3}, ++seed, kFloat64, true);
  auto added =
      gradcheck([&](const TensorList& in) { return index_add(in[0], 0, repeated, in[1]); }, {x, source});
  EXPECT_TRUE(added) << added.message;
  Tensor index = random_index({4, 2}, 5, ++seed);
  Tensor big_src = random_input({5, 3}, ++seed, kFloat64, true);  // larger than index in both dims
  auto scattered =
      gradcheck([&](const TensorList& in) { return scatter_add(in[0], 0, index, in[1]); }, {x, big_src});
  EXPECT_TRUE(scattered) << scattered.message;
  auto scattered_t = gradcheck([&](const TensorList& in) { return scatter_add(in[0], 0, index, in[1].t()); },
                               {xt, random_input({3, 5}, ++seed, kFloat64, true)});
  EXPECT_TRUE(scattered_t) << scattered_t.message;
}

}  // namespace
}  // namespace nabla
