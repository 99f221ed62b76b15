# ctest: the training programs never destroy what they read or what is already there. An output
# path (--checkpoint, --log, --plot, inspect_attention's --out files) that is the data, another
# output, a FIFO or a device is refused before any work and left as it is; a fresh run refuses
# an existing checkpoint unless --overwrite; a resumed run keeps the checkpoint's mode; whole-number
# flags are read strictly, with a short message.
#   cmake -DTRAIN_MLM=<binary> -DTRAIN_CAUSAL_LM=<binary> -DTRAIN_LISTOPS=<binary>
#         -DINSPECT=<binary> -DWORK_DIR=<scratch dir> -P program_paths.cmake
include(${CMAKE_CURRENT_LIST_DIR}/tiny_corpus.cmake)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(data ${WORK_DIR}/d.txt)
write_tiny_corpus(${data})
file(SHA256 ${data} data_hash)
set(model --seq-len 32 --batch 8 --layers 1 --d-model 32 --heads 2 --d-ff 64 --k 8 --eval-every 2
  --eval-sequences 8 --threads 1 --warmup 0)
set(small --data ${data} ${model})

function(run_ok name)
  execute_process(COMMAND ${ARGN} WORKING_DIRECTORY ${WORK_DIR}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: failed (${rc}):\n${out}\n${err}")
  endif()
endfunction()

# A non-zero exit and exactly one short line on stderr containing `expect`; the data unchanged.
function(expect_failure name expect)
  execute_process(COMMAND ${ARGN} WORKING_DIRECTORY ${WORK_DIR}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(STRIP "${err}" err)
  string(FIND "${err}" "\n" newline)
  string(FIND "${err}" "${expect}" at)
  string(LENGTH "${err}" length)
  if(rc EQUAL 0 OR NOT newline EQUAL -1 OR at EQUAL -1 OR length GREATER 300)
    message(FATAL_ERROR "${name}: expected a failure with one line containing '${expect}', "
      "got status ${rc} and:\n${err}")
  endif()
  file(SHA256 ${data} hash)
  if(NOT hash STREQUAL data_hash)
    message(FATAL_ERROR "${name}: the data file changed")
  endif()
endfunction()

# --- Outputs that are the data, or each other. ---
expect_failure(log_on_data "--log ${data} is the same file as --data ${data}"
  ${TRAIN_MLM} ${small} --steps 2 --checkpoint none --log ${data})
expect_failure(checkpoint_on_data "--checkpoint ${WORK_DIR}/./d.txt is the same file as --data"
  ${TRAIN_MLM} ${small} --steps 2 --checkpoint ${WORK_DIR}/./d.txt --overwrite)
expect_failure(plot_on_data "--plot ${data} is the same file as --data"
  ${TRAIN_MLM} ${small} --steps 2 --checkpoint none --log ${WORK_DIR}/run.csv --plot ${data})
file(CREATE_LINK ${data} ${WORK_DIR}/link.txt SYMBOLIC)
expect_failure(log_on_linked_data "is the same file as --data ${WORK_DIR}/link.txt"
  ${TRAIN_MLM} ${model} --data ${WORK_DIR}/link.txt --steps 2 --checkpoint none --log ${data})
expect_failure(log_on_plot "are the same file"
  ${TRAIN_MLM} ${small} --steps 2 --checkpoint none --log ${WORK_DIR}/x.csv --plot x.csv)
expect_failure(compare_on_plot "--plot ${WORK_DIR}/a.csv is the same file as --compare"
  ${TRAIN_MLM} --plot ${WORK_DIR}/a.csv --compare a.csv b.csv)
expect_failure(causal_lm_log_on_data "--log ${data} is the same file as --data ${data}"
  ${TRAIN_CAUSAL_LM} --data ${data} --seq-len 32 --batch 8 --layers 1 --d-model 32 --heads 2
  --d-ff 64 --steps 2 --threads 1 --checkpoint none --log ${data})
expect_failure(listops_log_on_data "is the same file as --data-dir"
  ${TRAIN_LISTOPS} --data-dir ${WORK_DIR}/listops --train-examples 16 --val-examples 8
  --test-examples 8 --steps 2 --batch 8 --threads 1 --checkpoint none
  --log ${WORK_DIR}/listops/basic_train.tsv)
if(EXISTS ${WORK_DIR}/listops/basic_train.tsv)
  message(FATAL_ERROR "train_listops generated its data before refusing its --log")
endif()

# --- An existing checkpoint: refused by a fresh run, continued by --resume, replaced by
# --overwrite; and its mode kept. ---
set(ckpt ${WORK_DIR}/run.safetensors)
run_ok(first_run ${TRAIN_MLM} ${small} --steps 4 --stop-at 2 --checkpoint ${ckpt})
file(SHA256 ${ckpt} ckpt_hash)
expect_failure(existing_checkpoint
  "--checkpoint ${ckpt}: a checkpoint is there already; pass --resume to continue its run, --overwrite"
  ${TRAIN_MLM} ${small} --steps 4 --checkpoint ${ckpt})
expect_failure(resume_and_overwrite "exclude each other"
  ${TRAIN_MLM} ${small} --steps 4 --checkpoint ${ckpt} --resume --overwrite)
file(SHA256 ${ckpt} hash)
if(NOT hash STREQUAL ckpt_hash)
  message(FATAL_ERROR "a refused run changed the checkpoint")
endif()
file(CHMOD ${ckpt} PERMISSIONS OWNER_READ OWNER_WRITE)
run_ok(resumed_run ${TRAIN_MLM} ${small} --steps 4 --checkpoint ${ckpt} --resume)
execute_process(COMMAND stat -c %a ${ckpt} OUTPUT_VARIABLE mode OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT mode STREQUAL "600")
  message(FATAL_ERROR "the resumed run saved the checkpoint with mode ${mode}, not 600")
endif()
run_ok(overwritten ${TRAIN_MLM} ${small} --steps 2 --checkpoint ${ckpt} --overwrite)

# --- A FIFO or a character device at --log or --plot: refused and left as it is. ---
execute_process(COMMAND mkfifo ${WORK_DIR}/fifo RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mkfifo failed")
endif()
set(specials fifo)
# The numbers of /dev/full; making a device needs CAP_MKNOD (root, outside most containers).
execute_process(COMMAND mknod ${WORK_DIR}/node c 1 7 RESULT_VARIABLE rc ERROR_QUIET)
if(rc EQUAL 0)
  list(APPEND specials node)
else()
  message(STATUS "mknod is not permitted here: the character-device case is skipped")
endif()
foreach(special IN LISTS specials)
  expect_failure(log_on_${special} "--log ${WORK_DIR}/${special}: not a regular file"
    ${TRAIN_MLM} ${small} --steps 2 --checkpoint none --log ${WORK_DIR}/${special})
  expect_failure(plot_on_${special} "--plot ${WORK_DIR}/${special}: not a regular file"
    ${TRAIN_MLM} ${small} --steps 2 --checkpoint none --log ${WORK_DIR}/run.csv
    --plot ${WORK_DIR}/${special})
  execute_process(COMMAND stat -c %F ${WORK_DIR}/${special} OUTPUT_VARIABLE kind
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT kind MATCHES "fifo|character special file")
    message(FATAL_ERROR "${special} became a ${kind}")
  endif()
endforeach()

# --- inspect_attention's files under --out may not be its input either. ---
file(MAKE_DIRECTORY ${WORK_DIR}/out)
file(COPY_FILE ${data} ${WORK_DIR}/out/spectrum.csv)
expect_failure(inspect_out_on_data "--out ${WORK_DIR}/out/spectrum.csv is the same file as --data"
  ${INSPECT} --checkpoint ${ckpt} --data ${WORK_DIR}/out/spectrum.csv --out ${WORK_DIR}/out
  --threads 1)

# --- Whole numbers: no sign where none belongs, no wrap, no saturation, a short message. ---
string(REPEAT "9" 300 nines)
expect_failure(negative_seed "--seed: out of range: expected a whole number from 0 to"
  ${TRAIN_MLM} ${small} --steps 2 --checkpoint none --seed -1)
expect_failure(long_seed "--seed: out of range" ${TRAIN_MLM} ${small} --steps 2 --checkpoint none
  --seed ${nines})
expect_failure(long_steps "--steps: out of range" ${TRAIN_MLM} ${small} --checkpoint none
  --steps ${nines})
expect_failure(long_k_schedule "--k-schedule: out of range" ${TRAIN_MLM} --data ${data}
  --layers 2 --steps 2 --checkpoint none --k-schedule 8,${nines})
expect_failure(hex_batch "--batch: expected a whole number, got '0x10'" ${TRAIN_MLM} ${small}
  --steps 2 --checkpoint none --batch 0x10)
expect_failure(negative_listops_seed "--data-seed: out of range" ${TRAIN_LISTOPS}
  --data-dir ${WORK_DIR}/listops --checkpoint none --data-seed -1)
expect_failure(long_top_k "--top-k: out of range" ${TRAIN_CAUSAL_LM} --data ${data}
  --checkpoint none --top-k ${nines})
expect_failure(negative_inspect_seed "--seed: out of range" ${INSPECT} --checkpoint ${ckpt}
  --text "some text" --seed -1)
