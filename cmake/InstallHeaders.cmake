# Run by `cmake --install`: installs the public headers, which are the umbrella header
# nn/tinyformer.h and every header it includes, directly or through others, each under
# include/tinyformer/ in its layer folder (<tinyformer/core/tensor.h>). What no public header
# includes (the backends, and the math and index arithmetic that core/ shares with the kernels:
# core/math.h, core/gemm.h, ...) stays private. Computed when installing, so a header added to
# the umbrella (or included by a public one) is installed without another list to keep.
#   TINYFORMER_SOURCE_DIR, TINYFORMER_INCLUDE_DESTINATION: set by cmake/Install.cmake.
cmake_policy(PUSH)
cmake_policy(VERSION 3.25)
set(todo nn/tinyformer.h)
set(public)
while(todo)
  list(POP_FRONT todo header)
  if(header IN_LIST public)
    continue()
  endif()
  list(APPEND public ${header})
  file(STRINGS ${TINYFORMER_SOURCE_DIR}/${header} lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([^\"]+)\".*" "\\1" included "${line}")
    if(NOT EXISTS ${TINYFORMER_SOURCE_DIR}/${included})
      message(FATAL_ERROR "${header} includes \"${included}\", which is not a path from the "
        "repository's root")
    endif()
    list(APPEND todo ${included})
  endforeach()
endwhile()

list(REMOVE_ITEM public nn/tinyformer.h)
file(INSTALL ${TINYFORMER_SOURCE_DIR}/nn/tinyformer.h
  DESTINATION ${CMAKE_INSTALL_PREFIX}/${TINYFORMER_INCLUDE_DESTINATION})
foreach(header IN LISTS public)
  get_filename_component(folder ${header} DIRECTORY)
  file(INSTALL ${TINYFORMER_SOURCE_DIR}/${header}
    DESTINATION ${CMAKE_INSTALL_PREFIX}/${TINYFORMER_INCLUDE_DESTINATION}/${folder})
endforeach()
cmake_policy(POP)
