# `iser bench moe ...`: flag errors are reported before any GPU work starts, so these
# run on machines without a GPU. Only in builds with the CUDA part (the bench command needs it).
if(WITH_CUDA)
  expect(bench_layer_bad_routing nonzero "--routing 'nope': expected power-law, balanced or trace"
         bench moe layer --routing nope)
  expect(bench_layer_layer_out_of_range nonzero "--layers: layer 99 outside [0, "
         bench moe layer --routing trace --layers 99)
  expect(bench_layer_layer_not_a_number nonzero "--layers '15,x': 'x' is not a layer number"
         bench moe layer --routing trace --layers 15,x)
  expect(bench_layer_missing_trace nonzero "does_not_exist"
         bench moe layer --routing trace --trace ${SRC}/tests/cli/data/does_not_exist.safetensors)
  expect(bench_e3_bad_layer_range nonzero "--layers '3:1:1': expected first:last:step"
         bench moe e3 --layers 3:1:1)
endif()
