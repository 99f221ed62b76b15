# MPI for training across processes (nn/distributed/): Open MPI from Debian (libopenmpi-dev,
# openmpi-bin). Sets TINYFORMER_MPI_ENABLED; when on, nn/distributed/mpi/mpi.cpp is built
# against MPI's C API, otherwise nn/distributed/mpi/no_mpi.cpp, which says the build has none.
set(TINYFORMER_MPI_ENABLED OFF)
if(TINYFORMER_MPI STREQUAL "OFF")
  return()
endif()

# MPI's C API (its C++ bindings are deprecated): FindMPI checks it with the C compiler.
enable_language(C)
find_package(MPI COMPONENTS C)
if(NOT MPI_C_FOUND)
  if(TINYFORMER_MPI STREQUAL "ON")
    message(FATAL_ERROR "TINYFORMER_MPI=ON but no MPI was found (apt-get install libopenmpi-dev "
      "openmpi-bin)")
  endif()
  message(STATUS "tinyformer: no MPI found, building without distributed training")
  return()
endif()
set(TINYFORMER_MPI_ENABLED ON)
message(STATUS "tinyformer: distributed training on MPI ${MPI_C_VERSION} (${MPIEXEC_EXECUTABLE})")
