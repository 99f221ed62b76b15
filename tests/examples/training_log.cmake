# read_log(<csv> <var>): a training program's CSV log as a list of rows cut after the seventh
# column (step, epoch, loss, lr, grad_norm and the first two evaluation columns), leaving out the
# timings, so that two runs' logs compare bit for bit.
function(read_log path out)
  file(STRINGS ${path} rows)
  set(kept "")
  foreach(row IN LISTS rows)
    string(REGEX MATCH "^[^,]*,[^,]*,[^,]*,[^,]*,[^,]*,[^,]*,[^,]*," prefix "${row}")
    list(APPEND kept "${prefix}")
  endforeach()
  set(${out} "${kept}" PARENT_SCOPE)
endfunction()
