# ctest: a run stopped at step 5 and resumed from its checkpoint logs exactly the losses, learning
# rates, gradient norms and validation losses of an uninterrupted run (model, optimizer, data
# order, masks and dropout all continue where they stopped).
#   cmake -DTRAIN_MLM=<binary> -DWORK_DIR=<scratch dir> [-DPRECISION=bf16] -P train_mlm_resume.cmake
# With PRECISION=bf16 both runs train in mixed precision (the checkpoint holds the float32
# masters), and their losses must differ from a float32 run's.
include(${CMAKE_CURRENT_LIST_DIR}/tiny_corpus.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/training_log.cmake)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
write_tiny_corpus(${WORK_DIR}/tiny.txt)
# Dropout stays on (0.1) so that the generator's position must be restored too.
set(args --data ${WORK_DIR}/tiny.txt --seq-len 32 --batch 8 --layers 1 --d-model 32 --heads 2
  --d-ff 64 --k 8 --eval-every 4 --eval-sequences 16 --log-every 1 --steps 12 --warmup 3
  --threads 1)
if(DEFINED PRECISION)
  list(APPEND args --precision ${PRECISION})
endif()

function(train)
  execute_process(COMMAND ${TRAIN_MLM} ${args} ${ARGN}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "train_mlm ${ARGN} failed (${rc}):\n${out}\n${err}")
  endif()
endfunction()

train(--checkpoint ${WORK_DIR}/a.safetensors --log ${WORK_DIR}/a.csv)
train(--checkpoint ${WORK_DIR}/b.safetensors --log ${WORK_DIR}/b.csv --stop-at 5)
train(--checkpoint ${WORK_DIR}/b.safetensors --log ${WORK_DIR}/b.csv --resume)

# The columns that must agree: step, epoch, loss, lr, grad_norm, val_loss, val_ppl (the last
# two, throughput and time, differ between any two runs).
read_log(${WORK_DIR}/a.csv a)
read_log(${WORK_DIR}/b.csv b)
list(LENGTH a n)
if(NOT n EQUAL 13)  # header and steps 1..12
  message(FATAL_ERROR "expected 13 lines in a.csv, got ${n}:\n${a}")
endif()
if(NOT a STREQUAL b)
  string(REPLACE ";" "\n" a "${a}")
  string(REPLACE ";" "\n" b "${b}")
  message(FATAL_ERROR "the resumed run differs from the uninterrupted one:\n${a}\n---\n${b}")
endif()

if(DEFINED PRECISION)
  list(REMOVE_ITEM args --precision ${PRECISION})
  train(--checkpoint ${WORK_DIR}/c.safetensors --log ${WORK_DIR}/c.csv)
  read_log(${WORK_DIR}/c.csv c)
  if(a STREQUAL c)
    message(FATAL_ERROR "--precision ${PRECISION} logged the float32 run's losses")
  endif()
endif()
