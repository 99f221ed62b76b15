# ctest: a train_causal_lm checkpoint is a model checkpoint like train_mlm's. A run stopped at
# step 5 and resumed logs the same rows as the uninterrupted run (bit for bit: losses, learning
# rates, gradient norms, validation); evaluate_checkpoint opens the checkpoint alone and gives
# the validation perplexity train_causal_lm printed; inspect_attention draws its causal maps.
#   cmake -DTRAIN_CAUSAL_LM=<binary> -DEVALUATE=<binary> -DINSPECT=<binary>
#         -DWORK_DIR=<scratch dir> -P causal_lm_checkpoint.cmake
include(${CMAKE_CURRENT_LIST_DIR}/tiny_corpus.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/training_log.cmake)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
write_tiny_corpus(${WORK_DIR}/tiny.txt)
set(args --data ${WORK_DIR}/tiny.txt --seq-len 32 --batch 8 --layers 1 --d-model 32 --heads 2
  --d-ff 64 --eval-every 4 --eval-sequences 16 --log-every 1 --steps 10 --warmup 3 --threads 1
  --dropout 0.1)

function(run program)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${program} failed (${rc}):\n${out}\n${err}")
  endif()
  set(output "${out}" PARENT_SCOPE)
endfunction()

run(train_causal_lm ${TRAIN_CAUSAL_LM} ${args} --checkpoint ${WORK_DIR}/a.safetensors
  --log ${WORK_DIR}/a.csv)
set(trained "${output}")
run(train_causal_lm ${TRAIN_CAUSAL_LM} ${args} --checkpoint ${WORK_DIR}/b.safetensors
  --log ${WORK_DIR}/b.csv --stop-at 5)
run(train_causal_lm ${TRAIN_CAUSAL_LM} ${args} --checkpoint ${WORK_DIR}/b.safetensors
  --log ${WORK_DIR}/b.csv --resume)

read_log(${WORK_DIR}/a.csv a)
read_log(${WORK_DIR}/b.csv b)
list(LENGTH a n)
if(NOT n EQUAL 11)  # header and steps 1..10
  message(FATAL_ERROR "expected 11 lines in a.csv, got ${n}:\n${a}")
endif()
if(NOT a STREQUAL b)
  string(REPLACE ";" "\n" a "${a}")
  string(REPLACE ";" "\n" b "${b}")
  message(FATAL_ERROR "the resumed run differs from the uninterrupted one:\n${a}\n---\n${b}")
endif()

# evaluate_checkpoint: the model from the checkpoint alone, the same perplexity.
run(evaluate_checkpoint ${EVALUATE} --checkpoint ${WORK_DIR}/a.safetensors --threads 1)
set(evaluated "${output}")
string(REGEX MATCH "perplexity ([0-9.]+)" _ "${evaluated}")
set(ppl "${CMAKE_MATCH_1}")
string(FIND "${evaluated}" "model: CausalLM" at)
if(at EQUAL -1 OR ppl STREQUAL "")
  message(FATAL_ERROR "evaluate_checkpoint did not describe and evaluate a CausalLM:\n${evaluated}")
endif()
string(FIND "${trained}" "final validation perplexity ${ppl} " at)
if(at EQUAL -1)
  message(FATAL_ERROR "evaluate_checkpoint's perplexity ${ppl} is not train_causal_lm's:\n"
    "${trained}\n---\n${evaluated}")
endif()

# inspect_attention: the decoder's maps from its checkpoint.
run(inspect_attention ${INSPECT} --checkpoint ${WORK_DIR}/a.safetensors
  --data ${WORK_DIR}/tiny.txt --out ${WORK_DIR}/maps --threads 1)
string(FIND "${output}" "model: CausalLM" at)
if(at EQUAL -1 OR NOT EXISTS ${WORK_DIR}/maps/trained_attention_layer0.png)
  message(FATAL_ERROR "inspect_attention drew no CausalLM maps:\n${output}")
endif()
