// Public header. NABLA_HOST_DEVICE marks a function that compiles for the host and, under nvcc,
// for the device too (Philox, the elementwise formulas, the pooling windows): one definition
// serves both backends.
#pragma once

#if defined(__CUDACC__)
#define NABLA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define NABLA_HOST_DEVICE inline
#endif
