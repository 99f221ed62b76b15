# The CPU backend's libraries: oneDNN, OpenBLAS (its OpenMP build, so that OpenBLAS, oneDNN and
# our loops share one OpenMP thread pool instead of fighting over the cores) and OpenMP.
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(dnnl CONFIG REQUIRED)
# JSON for the checkpoint headers and the model descriptions in their metadata
# (nn/io/safetensors.cpp, nn/io/model_file.cpp), linked privately: no installed header includes it.
find_package(nlohmann_json 3 REQUIRED)

find_path(TINYFORMER_CBLAS_INCLUDE cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/openblas
  NO_DEFAULT_PATH)
find_library(TINYFORMER_OPENBLAS openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp NO_DEFAULT_PATH)
find_library(TINYFORMER_LAPACK lapack
  PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp NO_DEFAULT_PATH)
if(NOT TINYFORMER_CBLAS_INCLUDE OR NOT TINYFORMER_OPENBLAS OR NOT TINYFORMER_LAPACK)
  message(FATAL_ERROR "tinyformer needs OpenBLAS built with OpenMP: apt-get install libopenblas-openmp-dev")
endif()

add_library(tinyformer_deps_cpu INTERFACE)
add_library(tinyformer::deps_cpu ALIAS tinyformer_deps_cpu)
# A system directory: its headers' C99 _Complex typedefs are not our code's to warn about.
target_include_directories(tinyformer_deps_cpu SYSTEM INTERFACE ${TINYFORMER_CBLAS_INCLUDE})
target_link_libraries(tinyformer_deps_cpu INTERFACE DNNL::dnnl ${TINYFORMER_OPENBLAS}
  ${TINYFORMER_LAPACK} OpenMP::OpenMP_CXX)
