# iser convert: the bundled data set is reproducible from the shared CSV; bad input fails cleanly.
set(shared ${SRC}/../shared/data)
set(out_dir ${CMAKE_CURRENT_BINARY_DIR}/cli_convert)
file(MAKE_DIRECTORY ${out_dir})
if(EXISTS ${shared}/dsv41-flash/coding.csv)
  expect(convert_csv 0 "1 histogram set(s) [40, 384] (E = 384, top-6)" convert
         --input ${shared}/dsv41-flash/coding.csv --output ${out_dir}/coding.safetensors
         --top-k 6 --model DeepSeek-V4.1-Flash --dataset coding --category coding
         --counts-dtype int32)
  if(CLI_LAST_RAN)
    file(SHA256 ${out_dir}/coding.safetensors converted)
    file(SHA256 ${SRC}/data/dsv41-flash-coding.safetensors bundled)
    if(NOT converted STREQUAL bundled)
      message(SEND_ERROR "convert_csv: output differs from data/dsv41-flash-coding.safetensors")
    endif()
  endif()
  expect(convert_csv_needs_k nonzero "top_k" convert --input ${shared}/dsv41-flash/coding.csv
         --output ${out_dir}/x.safetensors)
endif()
if(EXISTS ${shared}/real/olmoe-1b-7b-gsm8k-layer0.jsonl)
  expect(convert_olmoe 0 "skipped 2048 leading profiling rows" convert
         --input ${shared}/real/olmoe-1b-7b-gsm8k-layer0.jsonl --output ${out_dir}/olmoe.safetensors
         --skip-profile-rows)
  cli_requires(convert_olmoe)
  expect(convert_roundtrip 0 "topk_ids [1, 4471, 8]" convert
         --input ${out_dir}/olmoe.safetensors --output ${out_dir}/olmoe16.safetensors
         --ids-dtype int16)
endif()
if(EXISTS ${shared}/real/mixtral-8x7b-gsm8k.jsonl)
  expect(convert_mixtral_needs_e nonzero "never guessed" convert
         --input ${shared}/real/mixtral-8x7b-gsm8k.jsonl --output ${out_dir}/m.safetensors)
endif()
file(WRITE ${out_dir}/bad.safetensors "12345678{not json")
expect(convert_bad_file nonzero "bad.safetensors" convert --input ${out_dir}/bad.safetensors
       --output ${out_dir}/y.safetensors)
expect(convert_bad_format nonzero "unknown trace format 'xml'" convert
       --input ${out_dir}/bad.safetensors --output ${out_dir}/y.safetensors --format xml)

# Engine dumps built the way each engine writes them (tests/cli/data/engines/make_fixtures.py).
set(engines ${SRC}/tests/cli/data/engines)
expect(convert_sglang_stat 0
       "iteration_counts [3, 4, 8] (E = 8, top-2); SGLang stat dump: 3 forward pass(es), 5 unused buffer row(s) dropped; 1 layer(s) without routes (dense): 0"
       convert --input ${engines}/expert_distribution_recorder_1764633600.5.pt
       --output ${out_dir}/sglang_stat.safetensors --top-k 2)
expect(convert_sglang_stat_format 0 "iteration_counts [3, 4, 8]" convert --format sglang
       --input ${engines}/expert_distribution_recorder_1764633600.5.pt
       --output ${out_dir}/sglang_stat2.safetensors --top-k 2)
expect(convert_sglang_stat_needs_k nonzero "an SGLang stat dump does not record it" convert
       --input ${engines}/expert_distribution_recorder_1764633600.5.pt
       --output ${out_dir}/x.safetensors)
expect(convert_sglang_per_pass 0 "iteration_rank_counts [3, 4, 2, 8]" convert
       --input ${engines}/sglang_per_pass --output ${out_dir}/sglang_pp.safetensors --top-k 2)
expect(convert_sglang_per_token 0 "topk_ids [4, 16, 2] (E = 8, top-2)" convert
       --input ${engines}/sglang_per_token --output ${out_dir}/sglang_pt.safetensors)
expect(convert_trtllm_pp 0 "pipeline stages: ranks 0,1 hold layers 1,2; ranks 2,3 hold layers 3"
       convert --input ${engines}/trtllm_pp --output ${out_dir}/trt_pp.safetensors)
expect(convert_trtllm_raw 0 "topk_ids [3, 27, 2]" convert --input ${engines}/trtllm_adp
       --output ${out_dir}/trt_raw.safetensors --trtllm-raw)
expect(convert_trtllm_lb_needs_map nonzero "TraceOptions::slot_map, --slot-map" convert
       --input ${engines}/trtllm_lb --output ${out_dir}/x.safetensors --num-experts 8)
expect(convert_trtllm_lb 0 "10 load-balancer slots mapped to 8 experts" convert
       --input ${engines}/trtllm_lb --output ${out_dir}/trt_lb.safetensors
       --slot-map ${engines}/trtllm_lb_slot_map.json)
expect(convert_vllm_window 0 "iteration_counts [4, 4, 8]" convert
       --input ${engines}/vllm_expert_load_window.safetensors
       --output ${out_dir}/vllm_w.safetensors --top-k 2)
expect(convert_vllm_window_step 0 "time order (ring rotated at step 2)" convert
       --input ${engines}/vllm_expert_load_window_step.safetensors
       --output ${out_dir}/vllm_ws.safetensors --top-k 2)
expect(convert_vllm_routed_needs_e nonzero "never guessed" convert
       --input ${engines}/vllm_routed_experts.safetensors --output ${out_dir}/x.safetensors)
expect(convert_vllm_unnamed nonzero "no tensor says what it holds (have: load)" convert
       --input ${engines}/vllm_unnamed.safetensors --output ${out_dir}/x.safetensors --top-k 2)
cli_requires(convert_sglang_stat)
expect(replay_sglang_dense 0 "3 layers; 1 without routes left out: 0" replay
       --trace ${out_dir}/sglang_stat.safetensors --ep 2 --tokens-per-rank 8 --policies none)
