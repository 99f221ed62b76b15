# The install test: installs the build tree to a fresh prefix, checks that exactly the public
# headers are there and that each compiles on its own, then configures, builds and runs
# examples/cmake_project against it (a gradient check and a small training program on the
# library's training helpers), the way an outside project would use the package.
#
#   cmake -DBUILD_DIR=... -DPROJECT_DIR=... -DWORK_DIR=... [-DCXX=...] [-DBUILD_TYPE=...]
#         [-DGENERATOR=...] -P check_install.cmake
foreach(var BUILD_DIR PROJECT_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_install: pass -D${var}=...")
  endif()
endforeach()
if(NOT BUILD_TYPE)
  set(BUILD_TYPE Release)
endif()

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "check_install: ${what} failed (${rc}):\n${out}")
  endif()
  message(STATUS "check_install: ${what}: ok")
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK_DIR}/prefix)
set(consumer ${WORK_DIR}/consumer)
file(REMOVE_RECURSE ${WORK_DIR})

run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix}
    --config ${BUILD_TYPE})

# What the package promises: the umbrella header with the headers it includes, the library
# and the package config.
file(GLOB_RECURSE config_files ${prefix}/*/tinyformerConfig.cmake)
file(GLOB_RECURSE libraries ${prefix}/*/libtinyformer.*)
foreach(header tinyformer.h core/tensor.h core/ops.def autograd/ops.h)
  if(NOT EXISTS ${prefix}/include/tinyformer/${header})
    message(FATAL_ERROR "check_install: ${prefix}/include/tinyformer/${header} was not installed")
  endif()
endforeach()
if(NOT config_files OR NOT libraries)
  message(FATAL_ERROR "check_install: no tinyformerConfig.cmake or libtinyformer under ${prefix}")
endif()

# Only public headers: no backend, and none of the kernel math core/ shares with the backends.
foreach(private core/math.h core/gemm.h core/strided_layout.h core/unary_math.h)
  if(EXISTS ${prefix}/include/tinyformer/${private})
    message(FATAL_ERROR "check_install: the private header ${private} was installed")
  endif()
endforeach()
file(GLOB_RECURSE backend_headers ${prefix}/include/tinyformer/backends/*)
if(backend_headers)
  message(FATAL_ERROR "check_install: backend headers were installed: ${backend_headers}")
endif()

# The outside projects build with one job per core.
cmake_host_system_information(RESULT jobs QUERY NUMBER_OF_LOGICAL_CORES)
set(generator_args)
if(GENERATOR)
  set(generator_args -G ${GENERATOR})
endif()
set(compiler_args)
if(CXX)
  set(compiler_args -DCMAKE_CXX_COMPILER=${CXX})
endif()
run("configure examples/cmake_project" ${CMAKE_COMMAND} ${generator_args} -S ${PROJECT_DIR}
    -B ${consumer} -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=${BUILD_TYPE}
    ${compiler_args})

# The package must come from the fresh prefix, not from anywhere else on the machine.
file(STRINGS ${consumer}/CMakeCache.txt found_dir REGEX "^tinyformer_DIR:")
string(FIND "${found_dir}" "${prefix}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "check_install: find_package found ${found_dir}, not the package in ${prefix}")
endif()

run("build examples/cmake_project" ${CMAKE_COMMAND} --build ${consumer} --config ${BUILD_TYPE}
    --parallel ${jobs})

find_program(program gradient_check PATHS ${consumer} ${consumer}/${BUILD_TYPE} NO_DEFAULT_PATH)
if(NOT program)
  message(FATAL_ERROR "check_install: the build produced no gradient_check")
endif()
run("run gradient_check" ${program})
message(STATUS "${last_output}")

find_program(trainer train_tiny PATHS ${consumer} ${consumer}/${BUILD_TYPE} NO_DEFAULT_PATH)
if(NOT trainer)
  message(FATAL_ERROR "check_install: the build produced no train_tiny")
endif()
file(MAKE_DIRECTORY ${WORK_DIR}/train_tiny)
run("run train_tiny" ${trainer} ${WORK_DIR}/train_tiny --steps 20)
string(REGEX MATCH "validation loss [^\n]* after training[^\n]*" line "${last_output}")
message(STATUS "check_install: train_tiny: ${line}")
# Installed programs' idle OpenMP threads spin briefly, then sleep, unless told otherwise: the
# library that sets GOMP_SPINCOUNT was installed beside libtinyformer and is initialized before
# libgomp reads it.
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=OMP_WAIT_POLICY --unset=GOMP_SPINCOUNT
  OMP_DISPLAY_ENV=verbose ${program} OUTPUT_VARIABLE out ERROR_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT out MATCHES "GOMP_SPINCOUNT = '1000'")
  message(FATAL_ERROR "check_install: the installed gradient_check does not take the library's "
    "brief OpenMP spin by default (${rc}):\n${out}")
endif()
message(STATUS "check_install: a brief OpenMP spin by default: ok")

# The threading policy holds for installed programs too: OpenBLAS must resolve to its OpenMP
# build (see INSTALL_RPATH_USE_LINK_PATH in cmake/Install.cmake).
find_program(ldd ldd)
if(ldd)
  execute_process(COMMAND ${ldd} ${program} OUTPUT_VARIABLE linked ERROR_QUIET)
  if(linked MATCHES "libopenblas[^\n]*=> ([^ \n]+)")
    set(openblas "${CMAKE_MATCH_1}")
    if(NOT openblas MATCHES "openmp")
      message(FATAL_ERROR "check_install: OpenBLAS resolves to ${openblas}, not its OpenMP build")
    endif()
    message(STATUS "check_install: OpenBLAS resolves to ${openblas}")
  endif()
endif()

# A second outside project, built in parallel: the extension example (a custom feed-forward
# registered by name, examples/custom_layer.cpp) against the installed headers alone, and each
# installed header compiled on its own (one source file per header), with the warnings a strict
# user enables.
set(extension ${WORK_DIR}/extension)
file(GLOB_RECURSE headers RELATIVE ${prefix}/include ${prefix}/include/tinyformer/*.h)
list(LENGTH headers count)
set(header_sources)
foreach(header IN LISTS headers)
  string(MAKE_C_IDENTIFIER "${header}" name)
  file(WRITE ${extension}/src/headers/${name}.cpp "#include <${header}>\n")
  list(APPEND header_sources headers/${name}.cpp)
endforeach()
list(JOIN header_sources " " header_sources)
file(WRITE ${extension}/src/CMakeLists.txt
  "cmake_minimum_required(VERSION 3.25)\n"
  "project(tinyformer_extension LANGUAGES CXX)\n"
  "find_package(tinyformer CONFIG REQUIRED)\n"
  "add_executable(custom_layer ${PROJECT_DIR}/../custom_layer.cpp)\n"
  "target_link_libraries(custom_layer PRIVATE tinyformer::tinyformer)\n"
  "add_library(installed_headers OBJECT ${header_sources})\n"
  "target_link_libraries(installed_headers PRIVATE tinyformer::tinyformer)\n"
  "target_compile_options(installed_headers PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Werror)\n")
run("configure the extension and the header checks" ${CMAKE_COMMAND} ${generator_args}
    -S ${extension}/src -B ${extension}/build -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_BUILD_TYPE=${BUILD_TYPE} ${compiler_args})
run("build examples/custom_layer.cpp and ${count} installed headers, each on its own"
    ${CMAKE_COMMAND} --build ${extension}/build --config ${BUILD_TYPE} --parallel ${jobs})
