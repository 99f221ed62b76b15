// TF_HOST_DEVICE marks a function that every backend calls, from CPU loops and GPU kernels alike
// (under nvcc it is __host__ __device__; elsewhere nothing). core/ stays free of any other CUDA
// construct.
#pragma once

#if defined(__CUDACC__)
#define TF_HOST_DEVICE __host__ __device__
#else
#define TF_HOST_DEVICE
#endif
