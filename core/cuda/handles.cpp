#include "nabla/core/cuda/handles.h"

#include <array>
#include <map>
#include <mutex>
#include <vector>

#include "nabla/core/allocator.h"
#include "nabla/core/cuda/check.h"
#include "nabla/core/cuda/cublas_library.h"
#include "nabla/core/cuda/runtime.h"
#include "nabla/core/cuda/stream.h"

namespace nabla::cuda {

namespace {

constexpr int kMaxDevices = 128;
constexpr size_t kCublasLtWorkspaceBytes = size_t{32} << 20;  // as PyTorch's default on Hopper

// Free handles per device, shared by all threads.
template <typename Handle>
struct HandlePool {
  std::mutex mutex;
  std::array<std::vector<Handle>, kMaxDevices> free;
};

// One thread's handles, returned to the pools when the thread exits.
struct ThreadHandles {
  std::array<cublasHandle_t, kMaxDevices> cublas{};
  std::array<cublasLtHandle_t, kMaxDevices> cublaslt{};
  std::array<cudnnHandle_t, kMaxDevices> cudnn{};
  std::map<std::pair<int, void*>, DataPtr> workspaces;
  ~ThreadHandles();
};

HandlePool<cublasHandle_t>& cublas_pool() {
  static auto* pool = new HandlePool<cublasHandle_t>();  // leaked on purpose: outlives threads
  return *pool;
}
HandlePool<cublasLtHandle_t>& cublaslt_pool() {
  static auto* pool = new HandlePool<cublasLtHandle_t>();
  return *pool;
}
HandlePool<cudnnHandle_t>& cudnn_pool() {
  static auto* pool = new HandlePool<cudnnHandle_t>();
  return *pool;
}

template <typename Handle>
void give_back(HandlePool<Handle>& pool, std::array<Handle, kMaxDevices>& handles) {
  std::lock_guard lock(pool.mutex);
  for (int d = 0; d < kMaxDevices; ++d) {
    if (handles[d]) pool.free[d].push_back(handles[d]);
  }
}

ThreadHandles::~ThreadHandles() {
  give_back(cublas_pool(), cublas);
  give_back(cublaslt_pool(), cublaslt);
  give_back(cudnn_pool(), cudnn);
  // Workspaces go back to the allocator with the DataPtrs.
}

ThreadHandles& thread_handles() {
  thread_local ThreadHandles handles;
  return handles;
}

template <typename Handle, typename Create>
Handle acquire(HandlePool<Handle>& pool, Handle& slot, int device, Create create) {
  if (slot) return slot;
  {
    std::lock_guard lock(pool.mutex);
    if (!pool.free[device].empty()) {
      slot = pool.free[device].back();
      pool.free[device].pop_back();
      return slot;
    }
  }
  create(&slot);
  return slot;
}

}  // namespace

cublasHandle_t cublas_handle() {
  int device = current_device();
  auto& t = thread_handles();
  cublasHandle_t h = acquire(cublas_pool(), t.cublas[device], device, [](cublasHandle_t* out) {
    NABLA_CUBLAS_CHECK(cublas_api().cublasCreate_v2(out));
  });
  NABLA_CUBLAS_CHECK(
      cublas_api().cublasSetStream_v2(h, static_cast<cudaStream_t>(current_stream(device).handle())));
  return h;
}

cublasLtHandle_t cublaslt_handle() {
  int device = current_device();
  auto& t = thread_handles();
  return acquire(cublaslt_pool(), t.cublaslt[device], device,
                 [](cublasLtHandle_t* out) { NABLA_CUBLAS_CHECK(cublaslt_api().cublasLtCreate(out)); });
}

cudnnHandle_t cudnn_handle() {
  int device = current_device();
  auto& t = thread_handles();
  cudnnHandle_t h = acquire(cudnn_pool(), t.cudnn[device], device,
                            [](cudnnHandle_t* out) { NABLA_CUDNN_CHECK(cudnnCreate(out)); });
  NABLA_CUDNN_CHECK(cudnnSetStream(h, static_cast<cudaStream_t>(current_stream(device).handle())));
  return h;
}

Workspace cublaslt_workspace() {
  int device = current_device();
  Stream stream = current_stream(device);
  auto& slot = thread_handles().workspaces[{device, stream.handle()}];
  if (!slot.get()) slot = allocator_for(Device::cuda(device)).allocate(kCublasLtWorkspaceBytes);
  return {slot.get(), kCublasLtWorkspaceBytes};
}

}  // namespace nabla::cuda
