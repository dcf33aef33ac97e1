# Bad usage and bad input give a non-zero exit and a message naming the problem.
function(expect_failure expected_text)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0)
    message(FATAL_ERROR "expected failure from: ${ARGN}\n${out}${err}")
  endif()
  string(FIND "${out}${err}" "${expected_text}" pos)
  if(pos EQUAL -1)
    message(FATAL_ERROR "expected '${expected_text}' in output of ${ARGN}, got:\n${out}${err}")
  endif()
endfunction()

expect_failure("--task is required" ${CLI} check --candidate x.py)
expect_failure("defines no class Model" ${CLI} check --task ${FIXTURES}/kernel_eval/fixtures/tasks/no_model.py
               --candidate ${FIXTURES}/kernel_eval/fixtures/cpu/relu_ok.py --backend cpu)
expect_failure("does not exist" ${CLI} check --task ${FIXTURES}/kernel_eval/fixtures/tasks/relu.py
               --candidate /nonexistent/model_new.py --backend cpu)
expect_failure("unknown key 'judge.speling'" ${CLI} check --task ${FIXTURES}/kernel_eval/fixtures/tasks/relu.py
               --candidate ${FIXTURES}/kernel_eval/fixtures/cpu/relu_ok.py --set judge.speling=1)
expect_failure("not in {" ${CLI} check --task a.py --candidate b.py --backend tpu)
execute_process(COMMAND ${CLI} config --set judge.atol=0.5 RESULT_VARIABLE rc OUTPUT_VARIABLE out)
string(FIND "${out}" "atol: 0.5" pos)
if(NOT rc EQUAL 0 OR pos EQUAL -1)
  message(FATAL_ERROR "config dump failed: ${out}")
endif()
expect_failure("--model is required" ${CLI} generate --prompt hi)
expect_failure("cannot open /nonexistent" ${CLI} generate --model /nonexistent --prompt hi)
expect_failure("give --prompt or --input" ${CLI} generate --model /nonexistent)
expect_failure("--decode-kernels: persistent-folded not in" ${CLI} generate --model /nonexistent --prompt hi
               --decode-kernels persistent-folded)
