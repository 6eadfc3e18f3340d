# `iser model` (docs/models.md): the paper's numbers as the CLI prints them, and bad input.
set(model_tmp "${CMAKE_CURRENT_BINARY_DIR}/cli_model")
file(MAKE_DIRECTORY "${model_tmp}")

# §3.1, DeepSeek-V4-Pro on GB300, EP8, 8,192 tokens/rank (one substring per case).
set(v4 model overlap --hw GB300 --model deepseek-v4-pro --ep 8 --tokens-per-rank 8192)
expect(model_overlap_routed 0 "routed experts           432.9 us" ${v4} --copies 4)
expect(model_overlap_dc 0 "dispatch + combine       385.4 us" ${v4} --copies 4)
expect(model_overlap_copy 0 "one copy                  41.3 us" ${v4} --copies 4)
expect(model_overlap_shared 0 "shared expert            216.5 us" ${v4} --copies 4)
expect(model_overlap_hide 0 "beside routed experts 1.15" ${v4} --copies 4)
expect(model_overlap_exposed 0 "copies beside routed only 117.6 us" ${v4} --copies 4)
expect(model_overlap_ratio 0 "with shared 19,661 FLOP/B (above); device 16,667 FLOP/B" ${v4}
       --copies 4)
expect(model_overlap_no_copies 0 "routed 18,725 FLOP/B" ${v4} --copies 0)
expect(model_overlap_bf16 0 "combine                  685.1 us" ${v4} --combine bf16)
expect(model_overlap_16k 0 "beside routed experts 2.30"
       model overlap --model deepseek-v4-pro --tokens-per-rank 16384 --copies 2)
expect(model_overlap_vr200 0 "device 23,333 FLOP/B" model overlap --hw VR200)
expect(model_overlap_json 0 "\"copies_hidden_shared\": 5.24" ${v4} --copies 4 --json)
expect(model_overlap_json_keys 0 "\"ratio_with_shared\": 19660.8" ${v4} --copies 4 --json)
expect(model_overlap_fp8_h100 0 "routed fp8, combine fp8, shared fp8"
       model overlap --hw H100 --precision fp8)
expect(model_overlap_override 0 "device 20,000 FLOP/B"
       model overlap --hw GB300 --fp4-tflops 18000)

# The 16 scenarios of Figure 3.
expect(model_sweep_gb300 0
       "routed only: 12/16 above the device ratio; with the shared expert: 16/16 (ratio 19,661-32,768 FLOP/B)"
       model overlap --hw GB300 --sweep)
expect(model_sweep_vr200 0 "routed only: 0/16 above the device ratio; with the shared expert: 11/16"
       model overlap --hw VR200 --sweep)
expect(model_sweep_json 0 "\"above_device_with_shared\": true" model overlap --sweep --json)
expect(model_sweep_svg 0 "kimi-k3" model overlap --sweep --svg "${model_tmp}/fig3a.svg")
expect_file_contains(model_sweep_svg "${model_tmp}/fig3a.svg"
                     "12/16 -&gt; 16/16 above the line (16,667)")

# §3.3 Figure 5(b): ring 250 GB/s at g = 16 (W = 37.16 MB, 900 GB/s, 5 us, 2-MiB slices).
set(fig5b model broadcast --hw GB300 --bytes 37158912 --alpha 5us --slice 2MiB)
expect(model_broadcast_ring16 0 "16,249.5" ${fig5b} --group 16 --csv)
expect(model_broadcast_table 0 "scatter+allgather" ${fig5b} --group 2..16)
expect(model_broadcast_json 0 "\"sami_gbps\"" ${fig5b} --group 2..16 --json)
expect(model_broadcast_units 0 "ring slice 2,097,152 B" model broadcast --bytes 37.158912MB
       --slice 2048KiB --alpha 0.005ms)
expect(model_broadcast_svg 0 "W = 37,158,912 B" ${fig5b} --svg "${model_tmp}/fig5b.svg")
expect_file_contains(model_broadcast_svg "${model_tmp}/fig5b.svg" "A: ring (model)")

# Layer-time projection: the paper's GB200 fit and a fit from a file.
expect(model_project 0 "t =    1984.4 us" model project --fit gb200-ep8 --r 1.4)
file(WRITE "${model_tmp}/fit.json"
     "{\"name\": \"mine\", \"intercept_us\": 100, \"slope_us\": 200, \"ep\": 4, \"tokens_per_rank\": 4096}")
expect(model_project_file 0 "t =     400.0 us" model project --fit "${model_tmp}/fit.json" --r 1.5)
expect(model_project_json 0 "\"t_us\": 1984.39" model project --r 1.4 --json)
expect(model_list 0 "gb200-ep8" model list)

# Bad input: a clear one-line error and a non-zero exit.
expect(model_bad_hw nonzero "unknown hardware 'tpu'" model overlap --hw tpu)
expect(model_bad_model nonzero "unknown model 'llama'" model overlap --model llama)
expect(model_bad_tokens nonzero "invalid --tokens-per-rank = -5" model overlap --tokens-per-rank -5)
expect(model_bad_copies nonzero "invalid --copies = -1" model overlap --copies -1)
expect(model_bad_ep nonzero "--ep = 1" model overlap --ep 1)
expect(model_bad_combine nonzero "invalid --combine 'fp3'" model overlap --combine fp3)
expect(model_bad_fp4 nonzero "has no fp4 tensor cores" model overlap --hw H100)
expect(model_bad_he nonzero "invalid --he = -7" model overlap --he -7)
expect(model_bad_link nonzero "invalid --link-gbps = -3" model overlap --link-gbps -3)
expect(model_bad_sweep_shape nonzero "cannot be combined with --sweep" model overlap --sweep --he 10)
expect(model_bad_bytes nonzero "invalid --bytes '-1MB'" model broadcast --bytes -1MB)
expect(model_bad_unit nonzero "unknown unit 'XB'" model broadcast --bytes 12XB)
expect(model_bad_zero_bytes nonzero "--bytes = 0" model broadcast --bytes 0)
expect(model_bad_group nonzero "need 2 <= g_min" model broadcast --group 1)
expect(model_bad_group_text nonzero "invalid --group 'abc'" model broadcast --group abc)
expect(model_bad_alpha nonzero "invalid --alpha '-5us'" model broadcast --alpha -5us)
expect(model_bad_port nonzero "invalid --port-rate = 0" model broadcast --port-rate 0)
expect(model_bad_r nonzero "invalid imbalance ratio R = 0.5" model project --r 0.5)
expect(model_bad_r_ep nonzero "so R <= 8" model project --r 9)
expect(model_bad_fit nonzero "unknown layer-time fit 'nope'" model project --fit nope --r 1.2)
file(WRITE "${model_tmp}/bad_fit.json" "{\"name\": \"x\", \"intercept_us\": 1}")
expect(model_bad_fit_file nonzero "missing field 'slope_us'" model project
       --fit "${model_tmp}/bad_fit.json" --r 1.2)
expect(model_missing_r nonzero "--r is required" model project)
