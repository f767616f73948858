#include "nabla/core/cuda/cuda_device_memory.h"

#include <cuda.h>

#include "nabla/core/cuda/check.h"
#include "nabla/core/cuda/device_guard.h"
#include "nabla/core/error.h"

namespace nabla::cuda {

namespace {

// Driver virtual-memory entry points, looked up once.
struct VmmApi {
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemAddressReserve) reserve = nullptr;
  decltype(&cuMemAddressFree) address_free = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&cuDeviceGet) device_get = nullptr;
  decltype(&cuDeviceGetAttribute) attribute = nullptr;
  bool ok = false;
};

template <typename Fn>
bool lookup(const char* name, Fn* fn) {
  cudaDriverEntryPointQueryResult result{};
  void* p = nullptr;
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &result) != cudaSuccess ||
      result != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return false;
  }
  *fn = reinterpret_cast<Fn>(p);
  return true;
}

const VmmApi& vmm() {
  static const VmmApi api = [] {
    VmmApi a;
    a.ok = lookup("cuMemCreate", &a.create) && lookup("cuMemRelease", &a.release) &&
           lookup("cuMemAddressReserve", &a.reserve) && lookup("cuMemAddressFree", &a.address_free) &&
           lookup("cuMemMap", &a.map) && lookup("cuMemUnmap", &a.unmap) &&
           lookup("cuMemSetAccess", &a.set_access) &&
           lookup("cuMemGetAllocationGranularity", &a.granularity) && lookup("cuDeviceGet", &a.device_get) &&
           lookup("cuDeviceGetAttribute", &a.attribute);
    return a;
  }();
  return api;
}

void check_driver(CUresult status, const char* call) {
  if (status == CUDA_SUCCESS) return;
  throw_library_error("CUDA driver", call, __FILE__, __LINE__, static_cast<int>(status),
                      "virtual memory call failed");
}

CUmemAllocationProp page_properties(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

}  // namespace

CudaDeviceMemory::CudaDeviceMemory(int device) : device_(device) {
  DeviceGuard guard(device_);
  size_t free_bytes = 0;
  NABLA_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_));
  int vmm_supported = 0;
  CUdevice cu_device = 0;
  if (vmm().ok && vmm().device_get(&cu_device, device_) == CUDA_SUCCESS) {
    vmm().attribute(&vmm_supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, cu_device);
  }
  if (vmm_supported) {
    CUmemAllocationProp prop = page_properties(device_);
    size_t g = 0;
    if (vmm().granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS) granularity_ = g;
  }
}

// cudaMalloc is not a stream operation, but in the thread-local capture mode cuda::Graph uses,
// CUDA refuses "unsafe" calls from a capturing thread. The allocator may have to grow a private
// pool mid-capture, so the call runs in relaxed mode, as PyTorch's allocator does.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

void* CudaDeviceMemory::allocate(size_t bytes) {
  DeviceGuard guard(device_);
  RelaxedCaptureMode relaxed;
  void* p = nullptr;
  cudaError_t status = cudaMalloc(&p, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // the policy frees its cache and retries, or reports the OOM
    return nullptr;
  }
  NABLA_CUDA_CHECK(status);
  return p;
}

void CudaDeviceMemory::free(void* ptr, size_t) {
  DeviceGuard guard(device_);
  NABLA_CUDA_CHECK(cudaFree(ptr));
}

size_t CudaDeviceMemory::total_memory() const {
  return total_;
}

size_t CudaDeviceMemory::free_memory() const {
  DeviceGuard guard(device_);
  RelaxedCaptureMode relaxed;  // the OOM message may ask during a capture
  size_t free_bytes = 0, total = 0;
  NABLA_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  return free_bytes;
}

EventId CudaDeviceMemory::create_event() {
  DeviceGuard guard(device_);
  cudaEvent_t e = nullptr;
  NABLA_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return reinterpret_cast<EventId>(e);
}

void CudaDeviceMemory::record_event(EventId event, StreamId stream) {
  NABLA_CUDA_CHECK(
      cudaEventRecord(reinterpret_cast<cudaEvent_t>(event), reinterpret_cast<cudaStream_t>(stream)));
}

bool CudaDeviceMemory::query_event(EventId event) {
  cudaError_t status = cudaEventQuery(reinterpret_cast<cudaEvent_t>(event));
  if (status == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  NABLA_CUDA_CHECK(status);
  return true;
}

void CudaDeviceMemory::synchronize_event(EventId event) {
  NABLA_CUDA_CHECK(cudaEventSynchronize(reinterpret_cast<cudaEvent_t>(event)));
}

void CudaDeviceMemory::destroy_event(EventId event) {
  NABLA_CUDA_CHECK(cudaEventDestroy(reinterpret_cast<cudaEvent_t>(event)));
}

void* CudaDeviceMemory::reserve_virtual(size_t bytes) {
  CUdeviceptr base = 0;
  if (vmm().reserve(&base, bytes, granularity_, 0, 0) != CUDA_SUCCESS) return nullptr;
  return reinterpret_cast<void*>(base);
}

bool CudaDeviceMemory::map_more(void* base, size_t mapped, size_t bytes) {
  NABLA_ASSERT(granularity_ && bytes % granularity_ == 0,
               "map_more: {} bytes is not a multiple of the page size", bytes);
  CUmemAllocationProp prop = page_properties(device_);
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  auto start = reinterpret_cast<uintptr_t>(base) + mapped;
  // One handle per page, so that any tail can be unmapped later page by page.
  for (size_t off = 0; off < bytes; off += granularity_) {
    CUmemGenericAllocationHandle handle = 0;
    CUresult status = vmm().create(&handle, granularity_, &prop, 0);
    if (status == CUDA_ERROR_OUT_OF_MEMORY) {
      unmap_tail(base, mapped + off, off);  // undo this call's pages
      return false;
    }
    check_driver(status, "cuMemCreate");
    check_driver(vmm().map(start + off, granularity_, 0, handle, 0), "cuMemMap");
    check_driver(vmm().set_access(start + off, granularity_, &access, 1), "cuMemSetAccess");
    pages_[start + off] = handle;
  }
  return true;
}

void CudaDeviceMemory::unmap_tail(void* base, size_t mapped, size_t bytes) {
  // Unlike cudaFree, cuMemUnmap does not wait for queued kernels that may still use the pages
  // (a block freed on its own stream is reusable before the device reaches it). The policy only
  // unmaps when trimming its cache, never on the compute path or during capture.
  DeviceGuard guard(device_);
  NABLA_CUDA_CHECK(cudaDeviceSynchronize());
  auto end = reinterpret_cast<uintptr_t>(base) + mapped;
  for (uintptr_t page = end - bytes; page < end; page += granularity_) {
    auto it = pages_.find(page);
    NABLA_ASSERT(it != pages_.end(), "unmap_tail: no page mapped at {:#x}", page);
    check_driver(vmm().unmap(page, granularity_), "cuMemUnmap");
    check_driver(vmm().release(it->second), "cuMemRelease");
    pages_.erase(it);
  }
}

void CudaDeviceMemory::release_virtual(void* base, size_t bytes) {
  check_driver(vmm().address_free(reinterpret_cast<CUdeviceptr>(base), bytes), "cuMemAddressFree");
}

}  // namespace nabla::cuda
