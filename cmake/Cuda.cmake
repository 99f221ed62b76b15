# The CUDA backend's toolchain and libraries: nvcc, the CUDA runtime, cuBLAS, cuBLASLt, cuDNN.
# Sets TINYFORMER_CUDA_ENABLED and, when on, the interface target tinyformer::deps_cuda.
set(TINYFORMER_CUDA_ENABLED OFF)
if(TINYFORMER_CUDA STREQUAL "OFF" OR TINYFORMER_SANITIZE)
  # nvcc's objects do not mix with the sanitizer runtimes; the sanitized suite runs the CPU.
  if(TINYFORMER_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TINYFORMER_CUDA=ON cannot be combined with TINYFORMER_SANITIZE")
  endif()
  return()
endif()

include(CheckLanguage)
if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  if(TINYFORMER_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TINYFORMER_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
  message(STATUS "tinyformer: no nvcc found, building without the CUDA backend")
  return()
endif()

if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES ${TINYFORMER_CUDA_ARCHITECTURES})
endif()
enable_language(CUDA)
# CMake 3.25 predates nvcc's C++20 support and knows no flag for it.
if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
find_package(CUDAToolkit REQUIRED)

find_path(TINYFORMER_CUDNN_INCLUDE cudnn.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include /usr/include)
find_library(TINYFORMER_CUDNN cudnn
  HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib ${CUDAToolkit_LIBRARY_ROOT}/lib64)
if(NOT TINYFORMER_CUDNN OR NOT TINYFORMER_CUDNN_INCLUDE)
  message(FATAL_ERROR "tinyformer's CUDA backend needs cuDNN 9 (cudnn.h and libcudnn) next to "
    "the CUDA Toolkit, or configure with -DTINYFORMER_CUDA=OFF")
endif()

# NCCL, the GPUs' collectives for distributed training (nn/distributed/), ships with the CUDA
# Toolkit's libraries here; without it the backend's collectives say the build has none.
find_path(TINYFORMER_NCCL_INCLUDE nccl.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include /usr/include)
find_library(TINYFORMER_NCCL nccl
  HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib ${CUDAToolkit_LIBRARY_ROOT}/lib64)
set(TINYFORMER_NCCL_ENABLED OFF)
if(TINYFORMER_NCCL AND TINYFORMER_NCCL_INCLUDE)
  set(TINYFORMER_NCCL_ENABLED ON)
endif()

add_library(tinyformer_deps_cuda INTERFACE)
add_library(tinyformer::deps_cuda ALIAS tinyformer_deps_cuda)
target_include_directories(tinyformer_deps_cuda INTERFACE ${TINYFORMER_CUDNN_INCLUDE})
target_link_libraries(tinyformer_deps_cuda INTERFACE CUDA::cudart CUDA::cublas CUDA::cublasLt
  ${TINYFORMER_CUDNN})
if(TINYFORMER_NCCL_ENABLED)
  target_include_directories(tinyformer_deps_cuda INTERFACE ${TINYFORMER_NCCL_INCLUDE})
  target_link_libraries(tinyformer_deps_cuda INTERFACE ${TINYFORMER_NCCL})
endif()
set(TINYFORMER_CUDA_ENABLED ON)
message(STATUS "tinyformer: CUDA backend on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, "
  "architectures ${CMAKE_CUDA_ARCHITECTURES}, cuDNN ${TINYFORMER_CUDNN}, NCCL "
  "${TINYFORMER_NCCL_ENABLED})")
