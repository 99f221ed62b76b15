# ctest: train_mlm runs a few steps on a tiny text and writes its log and checkpoint; bad input
# (a missing file, an empty file, an unknown flag value, a sequence longer than the model's
# maximum, a checkpoint of another configuration, flag values out of range or not finite, a k
# schedule that overflows, a model too large for memory, a path the file system cannot look up)
# exits non-zero with one line on stderr and writes nothing.
#   cmake -DTRAIN_MLM=<binary> -DWORK_DIR=<scratch dir> -P train_mlm_smoke.cmake
include(${CMAKE_CURRENT_LIST_DIR}/tiny_corpus.cmake)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
write_tiny_corpus(${WORK_DIR}/tiny.txt)
set(small --seq-len 32 --batch 8 --layers 1 --d-model 32 --heads 2 --d-ff 64 --k 8
  --eval-every 3 --eval-sequences 16 --threads 1)

execute_process(COMMAND ${TRAIN_MLM} --data ${WORK_DIR}/tiny.txt ${small} --steps 6
    --checkpoint ${WORK_DIR}/run.safetensors --log ${WORK_DIR}/run.csv
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "train_mlm failed (${rc}):\n${out}\n${err}")
endif()
foreach(expected "unigram baseline" "final validation perplexity" "throughput:")
  string(FIND "${out}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "train_mlm's output lacks '${expected}':\n${out}")
  endif()
endforeach()
file(STRINGS ${WORK_DIR}/run.csv rows)
list(LENGTH rows n)
list(GET rows 0 header)
if(NOT header MATCHES "^step,epoch,loss,lr," OR NOT n EQUAL 3)  # header, steps 3 and 6
  message(FATAL_ERROR "unexpected log (${n} lines):\n${rows}")
endif()
if(NOT EXISTS ${WORK_DIR}/run.safetensors)
  message(FATAL_ERROR "train_mlm wrote no checkpoint")
endif()
file(SHA256 ${WORK_DIR}/run.safetensors checkpoint_hash)

# --profile 3: the ops of steps 11-13 by shape, printed once; the evaluation after step 12 and
# the other steps are left out (a product's calls are those of 3 steps).
execute_process(COMMAND ${TRAIN_MLM} --data ${WORK_DIR}/tiny.txt ${small} --steps 15
    --profile 3 --checkpoint none
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "train_mlm --profile failed (${rc}):\n${out}\n${err}")
endif()
string(REGEX MATCHALL "profile of 3 training steps \\(steps 11-13\\)" tables "${out}")
list(LENGTH tables n_tables)
if(NOT n_tables EQUAL 1 OR NOT out MATCHES "attention_backward" OR NOT out MATCHES "between ops")
  message(FATAL_ERROR "train_mlm --profile 3: expected one profile of steps 11-13:\n${out}")
endif()
# The output layer's forward product (d_model 32 to 260 symbols, the tied embedding): one call
# per step.
if(NOT out MATCHES "matmul 1x\\[256x32\\]\\[32x260\\]\\^T +cpu +3 ")
  message(FATAL_ERROR "train_mlm --profile 3: expected the output layer's 3 calls:\n${out}")
endif()

# Each bad input: a non-zero exit, exactly one line on stderr containing `expect`, and no log
# written (the checkpoint above is left as it was).
function(expect_failure name expect)
  execute_process(COMMAND ${TRAIN_MLM} ${ARGN} --log ${WORK_DIR}/${name}.csv
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0)
    message(FATAL_ERROR "${name}: train_mlm exited 0 on bad input:\n${out}")
  endif()
  string(STRIP "${err}" err)
  string(FIND "${err}" "\n" newline)
  string(FIND "${err}" "${expect}" at)
  if(NOT newline EQUAL -1 OR at EQUAL -1)
    message(FATAL_ERROR "${name}: expected one line with '${expect}' on stderr, got:\n${err}")
  endif()
  if(EXISTS ${WORK_DIR}/${name}.csv)
    message(FATAL_ERROR "${name}: a log was written despite the error")
  endif()
endfunction()

expect_failure(missing "does not exist" --data ${WORK_DIR}/no-such-file.txt ${small} --steps 2
  --checkpoint none)
file(WRITE ${WORK_DIR}/empty.txt "")
expect_failure(empty "empty" --data ${WORK_DIR}/empty.txt ${small} --steps 2 --checkpoint none)
expect_failure(bad_flag "--attention" --data ${WORK_DIR}/tiny.txt ${small} --attention sparse
  --checkpoint none)
expect_failure(too_long "maximum" --data ${WORK_DIR}/tiny.txt ${small} --max-seq-len 16
  --checkpoint none)
expect_failure(other_config "another configuration" --data ${WORK_DIR}/tiny.txt ${small}
  --attention full --steps 8 --checkpoint ${WORK_DIR}/run.safetensors --resume)
# Flag values out of range, named with their bounds (not the 309 digits of DBL_MAX), and
# non-finite values, refused while parsing rather than at the first step.
expect_failure(negative_lr "--lr: expected a value above 0, got -1" --data ${WORK_DIR}/tiny.txt
  ${small} --lr -1 --checkpoint none)
expect_failure(negative_k "--k: out of range: expected a whole number of 1 or more, got '-3'"
  --data ${WORK_DIR}/tiny.txt
  --seq-len 32 --batch 8 --layers 1 --d-model 32 --heads 2 --d-ff 64 --k -3 --checkpoint none)
expect_failure(negative_profile "--profile: out of range: expected a whole number of 0 or more"
  --data ${WORK_DIR}/tiny.txt ${small} --profile -2 --checkpoint none)
expect_failure(infinite_clip "--clip: expected a finite number, got inf"
  --data ${WORK_DIR}/tiny.txt ${small} --clip inf --checkpoint none)
expect_failure(nan_weight_decay "--weight-decay: expected a finite number, got nan"
  --data ${WORK_DIR}/tiny.txt ${small} --weight-decay nan --checkpoint none)
expect_failure(nan_dropout "--dropout: expected a finite number, got nan"
  --data ${WORK_DIR}/tiny.txt ${small} --dropout nan --checkpoint none)
# A k schedule whose decay overflows (it used to train with k = 8, 1, 1).
expect_failure(k_schedule_overflow "overflows a 64-bit integer" --data ${WORK_DIR}/tiny.txt
  --seq-len 32 --batch 8 --layers 3 --d-model 32 --heads 2 --d-ff 64 --threads 1 --steps 2
  --k-schedule linear:8,4611686018427387904,1 --checkpoint none)
# A model too large for memory (a [10^12, 32] feed-forward weight) says what to lower.
expect_failure(too_large "out of memory: shape [1000000000000, 32] float32 asked for" --data
  ${WORK_DIR}/tiny.txt --seq-len 32 --batch 8 --layers 1 --d-model 32 --heads 2
  --d-ff 1000000000000 --k 8 --threads 1 --steps 2 --checkpoint none)
expect_failure(too_large_hint "lower --batch" --data ${WORK_DIR}/tiny.txt --seq-len 32 --batch 8
  --layers 1 --d-model 32 --heads 2 --d-ff 1000000000000 --k 8 --threads 1 --steps 2
  --checkpoint none)
# A file system error (a path too long to look up) says what to check, on one line.
string(REPEAT "a" 5000 long_name)
expect_failure(long_path "check that the path exists" --data ${WORK_DIR}/${long_name} ${small}
  --steps 2 --checkpoint none)

file(SHA256 ${WORK_DIR}/run.safetensors after)
if(NOT after STREQUAL checkpoint_hash)
  message(FATAL_ERROR "a failed resume changed the checkpoint")
endif()
