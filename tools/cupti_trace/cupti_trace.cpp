// A GPU timeline of any CUDA program, for finding where a step's time goes when Nsight Systems
// is not at hand: every kernel, memcpy and memset, with its start and end on the GPU clock, its
// device and its stream, recorded through CUPTI's activity API and written as CSV at exit.
//
//   NABLA_CUPTI_TRACE=/tmp/trace-%p.csv LD_PRELOAD=build/cuda/tools/libnabla_cupti_trace.so prog ...
//
// %p in the path becomes the process id, so each rank of a multi-process job writes its own
// file (LD_PRELOAD and the variable pass to child processes). Columns: kind (kernel, memcpy,
// memset), device, stream, start_ns, end_ns, name (kernels; bytes for the others). Loaded
// without NABLA_CUPTI_TRACE it does nothing. tools/cupti_trace/summarize.py reads the files.
#include <cupti.h>

#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Record {
  char kind;  // 'K' kernel, 'C' memcpy, 'S' memset
  uint32_t device;
  uint32_t stream;
  uint64_t start;
  uint64_t end;
  std::string name;
};

std::mutex records_mutex;
std::vector<Record>* records = nullptr;  // leaked on purpose: other exit handlers may still flush
// Pointers, not objects: start_tracing may run before this file's dynamic initializers.
std::string* output_path = nullptr;

constexpr size_t kBufferBytes = size_t{16} << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = kBufferBytes;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::vector<Record> batch;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        batch.push_back({'K', k->deviceId, k->streamId, k->start, k->end, k->name ? k->name : "?"});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        batch.push_back({'C', m->deviceId, m->streamId, m->start, m->end, std::to_string(m->bytes)});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        batch.push_back({'S', m->deviceId, m->streamId, m->start, m->end, std::to_string(m->bytes)});
        break;
      }
      default:
        break;
    }
  }
  std::free(buffer);
  std::lock_guard lock(records_mutex);
  for (auto& r : batch) records->push_back(std::move(r));
}

void write_records() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard lock(records_mutex);
  FILE* f = std::fopen(output_path->c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "cupti_trace: cannot write %s\n", output_path->c_str());
    return;
  }
  std::fprintf(f, "kind,device,stream,start_ns,end_ns,name\n");
  for (const auto& r : *records) {
    const char* kind = r.kind == 'K' ? "kernel" : r.kind == 'C' ? "memcpy" : "memset";
    // Kernel names hold commas (template arguments): quote them.
    std::fprintf(f, "%s,%u,%u,%llu,%llu,\"%s\"\n", kind, r.device, r.stream,
                 static_cast<unsigned long long>(r.start), static_cast<unsigned long long>(r.end),
                 r.name.c_str());
  }
  std::fclose(f);
  std::fprintf(stderr, "cupti_trace: %zu records in %s\n", records->size(), output_path->c_str());
}

__attribute__((constructor)) void start_tracing() {
  const char* path = std::getenv("NABLA_CUPTI_TRACE");
  if (path == nullptr || *path == '\0') return;
  output_path = new std::string(path);
  if (auto at = output_path->find("%p"); at != std::string::npos) {
    output_path->replace(at, 2, std::to_string(getpid()));
  }
  records = new std::vector<Record>();
  records->reserve(1 << 20);
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "cupti_trace: CUPTI refused to start; no trace\n");
    return;
  }
  cuptiActivityFlushPeriod(200);  // hand over full buffers as the program runs, not all at exit
  std::atexit(write_records);
}

}  // namespace
