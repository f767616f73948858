// Internal (core/cuda). Checks that kernels make on values only the device holds (an index in
// range), reported without making the host wait for them.
//
// Note [Checks on the device]: reading an index tensor's range back before each gather costs a
// wait for the device per call, which stalls the host's run-ahead and which a CUDA graph cannot
// hold (a step that waits runs eagerly; nn/graphed_step.h). Instead a kernel checks the values
// where they are and records the first failure in one small record of mapped host memory; the
// kernels that read or write through the index skip an out-of-range one (a gather writes zeros),
// so nothing outside a tensor is touched. The host looks at the record at its next wait for the
// device (cuda::synchronize, a stream or event synchronization, a copy to the host such as
// item() or cpu()), which it does anyway, and throws there, naming the op, the bad value and
// what was allowed, as the check before the kernel used to. The error arrives later than the op
// (as PyTorch's device-side asserts do), and the step that read the bad index has run with zeros
// in its place; but the process and its device stay usable.
#pragma once

#include <cstdint>
#include <string>

namespace nabla::cuda {

// Where kernels record a failed check: written by the device, read by the host after a wait.
struct DeviceCheckRecord {
  unsigned int failed;  // 0, or 1 once a kernel has claimed the record
  int check;            // which message (register_device_check)
  long long value;      // the value that failed it
};

// An id for `message`, a fmt format with one {} for the failing value ("embedding: index {} is
// out of range for weight float32[32000, 768] (expected 0 <= index < 32000)"). The same message
// gets the same id. Thread-safe.
int register_device_check(const std::string& message);

// The record kernels write (device-visible host memory, one per process), set up on first use.
// Call it outside a CUDA graph capture first (the first eager call of an op does); nullptr
// without CUDA.
DeviceCheckRecord* device_check_record();

// Throws nabla::Error with the registered message if a kernel has recorded a failure since the
// last call, and clears the record. The runtime calls it after each wait for the device
// (core/cuda/api.cpp); call it after a wait of your own to see such errors sooner.
void raise_failed_device_checks();

}  // namespace nabla::cuda
