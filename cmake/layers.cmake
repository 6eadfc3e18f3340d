# The layers of iser and their public headers (include/iser/): core <- cuda <- runtime <- moe, with
# tools/, bench/ and python/ on top. A layer includes only the layers below it; the ctest
# lint.layers (scripts/check-layers.py) checks every include against these lists, and every
# header of include/iser/ must be in exactly one of them. cmake/install.cmake installs them
# (the CUDA layers' only where the CUDA part is built).
set(ISER_CORE_HEADERS
    bound.h copy_list.h counts.h eplb.h error.h metrics.h model.h plan.h plan_json.h planner.h
    policy.h replay.h rewrite.h svg.h topology.h trace.h validator.h)
set(ISER_CUDA_HEADERS gpu_planner.h moe_graph_dims.h replication.h)
set(ISER_RUNTIME_HEADERS runtime.h)
# testing/hooks.h: testing-only access to the per-rank calls and fault hooks (not installed).
set(ISER_MOE_HEADERS moe.h moe_ep_graph.h moe_ep_layer.h moe_layer.h slot_balancer.h testing/hooks.h)
