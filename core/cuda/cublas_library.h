// Internal (cuda/ only). cuBLAS and cuBLASLt, loaded with dlopen on first use instead of linked.
//
// Why: loading libcublasLt.so runs its static initializers -- a noticeable part of a second and
// hundreds of megabytes of resident memory -- in every process that links it, whether or not it
// ever multiplies a matrix on a GPU: every CPU test process, `nabla-train --help`, a
// data-loading worker. Calling through these tables moves that cost to the first GEMM (or the
// first cuBLAS error message).
//
// Each member has the exact type of the cuBLAS function it is named after (decltype of the
// header's declaration), so a call reads like the plain C call and the compiler checks it:
//
//   NABLA_CUBLAS_CHECK(cublaslt_api().cublasLtMatmulDescCreate(&desc, compute, scale));
//
// A missing library is a nabla::Error naming the file and dlerror()'s reason.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

namespace nabla::cuda {

struct CublasLtApi {
  decltype(&::cublasLtCreate) cublasLtCreate;
  decltype(&::cublasLtGetStatusString) cublasLtGetStatusString;
  decltype(&::cublasLtMatmul) cublasLtMatmul;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) cublasLtMatmulAlgoGetHeuristic;
  decltype(&::cublasLtMatmulDescCreate) cublasLtMatmulDescCreate;
  decltype(&::cublasLtMatmulDescDestroy) cublasLtMatmulDescDestroy;
  decltype(&::cublasLtMatmulDescSetAttribute) cublasLtMatmulDescSetAttribute;
  decltype(&::cublasLtMatmulPreferenceCreate) cublasLtMatmulPreferenceCreate;
  decltype(&::cublasLtMatmulPreferenceDestroy) cublasLtMatmulPreferenceDestroy;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) cublasLtMatmulPreferenceSetAttribute;
  decltype(&::cublasLtMatrixLayoutCreate) cublasLtMatrixLayoutCreate;
  decltype(&::cublasLtMatrixLayoutDestroy) cublasLtMatrixLayoutDestroy;
  decltype(&::cublasLtMatrixLayoutSetAttribute) cublasLtMatrixLayoutSetAttribute;
};

// The classic cuBLAS API, under its exported names (cublas_v2.h's macros map cublasCreate to
// cublasCreate_v2, and so on).
struct CublasApi {
  decltype(&::cublasCreate_v2) cublasCreate_v2;
  decltype(&::cublasSetStream_v2) cublasSetStream_v2;
};

// Loaded on the first call (thread-safe); later calls only return the table.
const CublasLtApi& cublaslt_api();
const CublasApi& cublas_api();

}  // namespace nabla::cuda
