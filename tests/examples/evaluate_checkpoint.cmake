# ctest: train_mlm trains a few steps on a tiny text; evaluate_checkpoint, another program, opens
# the checkpoint with nn::load_model alone (no model flags) and must report the validation loss
# train_mlm logged at the end, to 1e-6 relative. A corpus other than the training text is
# refused.
#   cmake -DTRAIN_MLM=<binary> -DEVALUATE=<binary> -DWORK_DIR=<scratch dir> -P evaluate_checkpoint.cmake
include(${CMAKE_CURRENT_LIST_DIR}/tiny_corpus.cmake)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
write_tiny_corpus(${WORK_DIR}/tiny.txt)

# Per-layer k, unshared learned projections, sinusoidal positions and dropout (which evaluation
# must turn off): the description has to carry all of it.
execute_process(COMMAND ${TRAIN_MLM} --data ${WORK_DIR}/tiny.txt --seq-len 32 --batch 8
    --layers 2 --d-model 32 --heads 2 --d-ff 64 --k-schedule 8,6 --projection linear
    --sharing none --positions sinusoidal --dropout 0.1 --steps 6 --eval-every 3
    --eval-sequences 24 --threads 1 --checkpoint ${WORK_DIR}/run.safetensors
    --log ${WORK_DIR}/run.csv
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "train_mlm failed (${rc}):\n${out}\n${err}")
endif()

# The last log row holds the final validation loss (column 6: step, epoch, loss, lr, grad_norm,
# val_loss, ...), written with 9 significant digits.
file(STRINGS ${WORK_DIR}/run.csv rows)
list(GET rows -1 last)
string(REPLACE "," ";" cells "${last}")
list(GET cells 5 trained)

execute_process(COMMAND ${EVALUATE} --checkpoint ${WORK_DIR}/run.safetensors --threads 1
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "evaluate_checkpoint failed (${rc}):\n${out}\n${err}")
endif()
if(NOT out MATCHES "validation loss ([0-9.]+) nats")
  message(FATAL_ERROR "evaluate_checkpoint printed no validation loss:\n${out}")
endif()
set(evaluated ${CMAKE_MATCH_1})

# |a - b| <= 1e-6 * a in integer arithmetic: each number as billionths.
function(billionths text out)
  if(NOT text MATCHES "^([0-9]+)\\.([0-9]+)$")
    message(FATAL_ERROR "expected a decimal number such as 2.5, got '${text}'")
  endif()
  set(whole ${CMAKE_MATCH_1})
  string(SUBSTRING "${CMAKE_MATCH_2}000000000" 0 9 fraction)
  string(REGEX REPLACE "^0+([0-9])" "\\1" fraction "${fraction}")
  math(EXPR value "${whole} * 1000000000 + ${fraction}")
  set(${out} ${value} PARENT_SCOPE)
endfunction()
billionths("${trained}" a)
billionths("${evaluated}" b)
math(EXPR diff "${a} - ${b}")
if(diff LESS 0)
  math(EXPR diff "-(${diff})")
endif()
math(EXPR scaled "${diff} * 1000000")
if(a LESS_EQUAL 0 OR scaled GREATER a)
  message(FATAL_ERROR "train_mlm's final validation loss ${trained} and evaluate_checkpoint's "
    "${evaluated} differ by more than 1e-6 relative:\n${out}")
endif()
message(STATUS "validation loss: ${trained} in training, ${evaluated} from the checkpoint")

# Another text is not the one the model was trained on.
file(WRITE ${WORK_DIR}/other.txt "${last}\n${out}\n${last}\n${out}\n${out}\n${out}\n")
execute_process(COMMAND ${EVALUATE} --checkpoint ${WORK_DIR}/run.safetensors
    --data ${WORK_DIR}/other.txt --threads 1
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "not the text the model was trained on")
  message(FATAL_ERROR "evaluate_checkpoint accepted another corpus (${rc}):\n${out}\n${err}")
endif()
