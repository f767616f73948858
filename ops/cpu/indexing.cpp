// CPU kernels for index_select, index_add, index_copy, gather and scatter_add.
//
// Each kernel drops the indexed dim from its operands (aliases with that dim removed) and walks
// the remaining positions with the elementwise LoopPlan, so any strides work and dense operands
// get flat rows. The indexed dim is handled by pointer offsets: for index_select/index_add/index_copy one
// plan is re-based per index entry; for gather/scatter_add the indexed dim is the innermost loop
// inside each position, so positions that differ only along it (the ones scatter_add may add
// into the same slot) always run on one thread, and parallel rows never race.
#include <omp.h>

#include "nabla/ops/cpu/indexing_kernels.h"
#include "nabla/ops/cpu/loops.h"
#include "nabla/ops/detail/alias.h"

namespace nabla::ops::cpu {

namespace {

Shape erase_dim(Shape sizes, int64_t dim) {
  sizes.erase(sizes.begin() + dim);
  return sizes;
}

// `t` at coordinate 0 along `dim`, with that dim removed and the given (broadcast-free) sizes.
Tensor without_dim(const Tensor& t, int64_t dim, const Shape& rest_sizes) {
  return ops::alias(t, rest_sizes, erase_dim(t.strides(), dim), t.storage_offset());
}

template <typename T>
T load(const char* p) {
  return *reinterpret_cast<const T*>(p);
}

template <typename T>
void add_into(char* dst, const char* src) {
  using C = compute_t<T>;
  T* d = reinterpret_cast<T*>(dst);
  *d = static_cast<T>(static_cast<C>(static_cast<C>(*d) + static_cast<C>(load<T>(src))));
}

// Shared walk of gather and scatter_add: fn(a_line, index_line, b_line) for every position of
// index with `dim` removed; each line is the base pointer of that position's run along `dim`.
template <typename Fn>
void for_each_line(const Tensor& a, const Tensor& index, const Tensor& b, int64_t dim, Fn fn) {
  const Shape rest = erase_dim(index.sizes(), dim);
  Tensor a_rest = without_dim(a, dim, rest);
  Tensor index_rest = without_dim(index, dim, rest);
  Tensor b_rest = without_dim(b, dim, rest);
  auto plan = make_plan<3>({&a_rest, &index_rest, &b_rest});
  for_each_row<3>(plan, [&](std::array<char*, 3> p, int64_t n, const std::array<int64_t, 3>& s) {
    for (int64_t r = 0; r < n; ++r) fn(p[0] + r * s[0], p[1] + r * s[1], p[2] + r * s[2]);
  });
}

}  // namespace

std::optional<int64_t> find_out_of_range(const Tensor& index, int64_t bound) {
  NABLA_ASSERT(index.dtype() == kInt64, "index tensors are int64");
  std::optional<int64_t> bad;
  auto plan = make_plan<1>({&index});
  for_each_row<1>(plan, [&](std::array<char*, 1> p, int64_t n, const std::array<int64_t, 1>& s) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = load<int64_t>(p[0] + i * s[0]);
      if (v < 0 || v >= bound) {
#pragma omp critical(nabla_find_out_of_range)
        if (!bad) bad = v;
        return;
      }
    }
  });
  return bad;
}

void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  const int64_t count = index.numel();
  const Shape rest = erase_dim(out.sizes(), dim);
  Tensor x_rest = without_dim(x, dim, rest);
  Tensor out_rest = without_dim(out, dim, rest);
  const int64_t item = static_cast<int64_t>(x.itemsize());
  const int64_t x_step = x.stride(dim) * item, out_step = out.stride(dim) * item;
  const int64_t* idx = index.data_ptr<int64_t>();
  const int64_t idx_stride = index.dim() == 0 ? 0 : index.stride(0);
  dispatch(x.dtype(), "index_select", [&]<typename T>() {
    const auto base = make_plan<2>({&out_rest, &x_rest});
    auto copy_row = [](std::array<char*, 2> p, int64_t n, const std::array<int64_t, 2>& s) {
      for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = load<T>(p[1] + i * s[1]);
    };
    // Large slices are threaded inside for_each_row; many small ones (an embedding lookup) are
    // spread over threads here instead.
    const bool over_index =
        base.numel < kParallelGrain && count * base.numel >= kParallelGrain && !omp_in_parallel();
#pragma omp parallel if (over_index)
    {
      auto plan = base;
#pragma omp for schedule(static)
      for (int64_t i = 0; i < count; ++i) {
        plan.data[0] = base.data[0] + i * out_step;
        plan.data[1] = base.data[1] + idx[i * idx_stride] * x_step;
        for_each_row<2>(plan, copy_row);
      }
    }
  });
}

namespace {

// The walk index_add_ and index_copy_ share: row(p, n, strides) over each slice pair
// (out.select(dim, index[i]), source.select(dim, i)), serially over the index, so repeated entries
// reach their slice in index order.
template <typename Row>
void over_indexed_slices(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& source, Row row) {
  const int64_t count = index.numel();
  const Shape rest = erase_dim(source.sizes(), dim);
  Tensor out_rest = without_dim(out, dim, rest);
  Tensor source_rest = without_dim(source, dim, rest);
  const int64_t item = static_cast<int64_t>(out.itemsize());
  const int64_t out_step = out.stride(dim) * item, source_step = source.stride(dim) * item;
  const int64_t* idx = index.data_ptr<int64_t>();
  const int64_t idx_stride = index.dim() == 0 ? 0 : index.stride(0);
  auto plan = make_plan<2>({&out_rest, &source_rest});
  const auto base = plan.data;
  for (int64_t i = 0; i < count; ++i) {
    plan.data[0] = base[0] + idx[i * idx_stride] * out_step;
    plan.data[1] = base[1] + i * source_step;
    for_each_row<2>(plan, row);
  }
}

}  // namespace

void index_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& source) {
  dispatch<TypeSet::FloatingAndIntegral>(out.dtype(), "index_add", [&]<typename T>() {
    // Repeated entries add into the same slice.
    over_indexed_slices(out, dim, index, source,
                        [](std::array<char*, 2> p, int64_t n, const std::array<int64_t, 2>& s) {
                          for (int64_t j = 0; j < n; ++j) add_into<T>(p[0] + j * s[0], p[1] + j * s[1]);
                        });
  });
}

void index_copy_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& source) {
  dispatch(out.dtype(), "index_copy", [&]<typename T>() {
    // Of repeated entries the last one's slice stays.
    over_indexed_slices(out, dim, index, source,
                        [](std::array<char*, 2> p, int64_t n, const std::array<int64_t, 2>& s) {
                          for (int64_t j = 0; j < n; ++j)
                            *reinterpret_cast<T*>(p[0] + j * s[0]) = load<T>(p[1] + j * s[1]);
                        });
  });
}

void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  const int64_t length = index.size(dim);
  if (index.numel() == 0) return;
  const int64_t item = static_cast<int64_t>(x.itemsize());
  const int64_t out_step = out.stride(dim) * item, x_step = x.stride(dim) * item;
  const int64_t idx_step = index.stride(dim) * static_cast<int64_t>(sizeof(int64_t));
  dispatch(x.dtype(), "gather", [&]<typename T>() {
    for_each_line(out, index, x, dim, [&](char* o, char* i, char* src) {
      for (int64_t j = 0; j < length; ++j) {
        *reinterpret_cast<T*>(o + j * out_step) = load<T>(src + load<int64_t>(i + j * idx_step) * x_step);
      }
    });
  });
}

void scatter_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  const int64_t length = index.size(dim);
  if (index.numel() == 0) return;
  const int64_t item = static_cast<int64_t>(out.itemsize());
  const int64_t out_step = out.stride(dim) * item, src_step = src.stride(dim) * item;
  const int64_t idx_step = index.stride(dim) * static_cast<int64_t>(sizeof(int64_t));
  dispatch<TypeSet::FloatingAndIntegral>(out.dtype(), "scatter_add", [&]<typename T>() {
    for_each_line(out, index, src, dim, [&](char* o, char* i, char* s) {
      for (int64_t j = 0; j < length; ++j) {
        add_into<T>(o + load<int64_t>(i + j * idx_step) * out_step, s + j * src_step);
      }
    });
  });
}

}  // namespace nabla::ops::cpu
