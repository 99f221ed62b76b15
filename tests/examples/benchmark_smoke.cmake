# ctest: a benchmark program (benchmark_libtorch, benchmark_attention) at toy sizes with a tiny
# time budget: it must finish, print its tables, and write JSON whose "ratios" are positive
# numbers with their spreads; examples/compare_benchmark_runs.py must find the file equal to
# itself and a copy with one ratio 20% off different (where Python 3 is found);
# examples/ceiling_efficiency.py must read a benchmark_libtorch file, give twice the efficiency
# where every reference product took twice as long, and refuse another program's file; a bad
# budget is refused.
#   cmake -DBENCHMARK=<binary> -DWORK_DIR=<dir> "-DARGS=<flags>" -DEXPECT=<text in the output>
#     [-DPYTHON=<python3> -DCOMPARE=<compare_benchmark_runs.py>
#      -DEFFICIENCY=<ceiling_efficiency.py>] -P benchmark_smoke.cmake
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
separate_arguments(args UNIX_COMMAND "${ARGS}")
set(json ${WORK_DIR}/run.json)

execute_process(COMMAND ${BENCHMARK} ${args} --json ${json}
  WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${BENCHMARK} failed (${rc}):\n${out}\n${err}")
endif()
foreach(expected "${EXPECT}" "warm-up rounds" "results written to")
  string(FIND "${out}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the output lacks '${expected}':\n${out}")
  endif()
endforeach()

file(READ ${json} text)
string(JSON count LENGTH "${text}" ratios)
if(count LESS 1)
  message(FATAL_ERROR "no ratios in ${json}:\n${text}")
endif()
math(EXPR last "${count} - 1")
foreach(i RANGE ${last})
  string(JSON name GET "${text}" ratios ${i} name)
  string(JSON median GET "${text}" ratios ${i} median)
  string(JSON spread_type TYPE "${text}" ratios ${i} spread)
  if(NOT median GREATER 0 OR NOT spread_type STREQUAL "NUMBER")
    message(FATAL_ERROR "ratio '${name}': median ${median}, spread of type ${spread_type}")
  endif()
endforeach()

if(PYTHON AND COMPARE)
  execute_process(COMMAND ${PYTHON} ${COMPARE} ${json} ${json}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "largest difference: 0.0%")
    message(FATAL_ERROR "a file compared with itself (${rc}):\n${out}\n${err}")
  endif()
  # CMake has no floating-point arithmetic: Python writes the copy with one ratio 1.2 times.
  execute_process(COMMAND ${PYTHON} -c
    "import json,sys; d=json.load(open(sys.argv[1])); d['ratios'][0]['median']*=1.2; json.dump(d,open(sys.argv[2],'w'))"
    ${json} ${WORK_DIR}/changed.json RESULT_VARIABLE rc)
  execute_process(COMMAND ${PYTHON} ${COMPARE} ${json} ${WORK_DIR}/changed.json
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 1 OR NOT out MATCHES "\\+20\\.0%  EXCEEDS")
    message(FATAL_ERROR "a ratio 20% off was not flagged (${rc}):\n${out}\n${err}")
  endif()
endif()

if(PYTHON AND EFFICIENCY)
  string(JSON program GET "${text}" program)
  execute_process(COMMAND ${PYTHON} ${EFFICIENCY} ${json}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(program STREQUAL "benchmark_libtorch")
    string(REGEX MATCH "lowest: ([0-9.]+)" found "${out}")
    if(NOT rc EQUAL 0 OR NOT found)
      message(FATAL_ERROR "ceiling_efficiency.py on ${json} (${rc}):\n${out}\n${err}")
    endif()
    set(lowest ${CMAKE_MATCH_1})
    # Every reference product twice as long: every round's value, so the lowest median, doubles.
    execute_process(COMMAND ${PYTHON} -c
      "import json,sys; d=json.load(open(sys.argv[1]))\nfor s in d['sets']:\n  for j in s['jobs']:\n    if j['name'].endswith('] product'): j['ms']=[2*v for v in j['ms']]\njson.dump(d,open(sys.argv[2],'w'))"
      ${json} ${WORK_DIR}/slow_product.json RESULT_VARIABLE rc)
    execute_process(COMMAND ${PYTHON} ${EFFICIENCY} ${WORK_DIR}/slow_product.json
      RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    string(REGEX MATCH "lowest: ([0-9.]+)" found "${out}")
    execute_process(COMMAND ${PYTHON} -c
      "import sys; a, b = map(float, sys.argv[1:]); sys.exit(0 if abs(b - 2 * a) <= 0.002 + 0.001 * b else 1)"
      ${lowest} "${CMAKE_MATCH_1}" RESULT_VARIABLE twice)
    if(NOT rc EQUAL 0 OR NOT found OR NOT twice EQUAL 0)
      message(FATAL_ERROR "twice the product time did not double the efficiency (${lowest}):\n${out}\n${err}")
    endif()
  elseif(NOT rc EQUAL 2)
    message(FATAL_ERROR "ceiling_efficiency.py accepted ${program}'s file (${rc}):\n${out}\n${err}")
  endif()
endif()

execute_process(COMMAND ${BENCHMARK} ${args} --budget -1 --json ${WORK_DIR}/bad.json
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR EXISTS ${WORK_DIR}/bad.json)
  message(FATAL_ERROR "--budget -1 was accepted:\n${out}\n${err}")
endif()
