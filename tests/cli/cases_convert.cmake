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
