# Skew families (`iser counts`, `iser replay --synthetic`) and the bound tool (`iser bound`,
# `iser replay --bound`), on small shapes so the solver finishes at once.
set(skew_counts ${CMAKE_CURRENT_BINARY_DIR}/cli_skew_counts.json)
set(skew_shape --num-experts 32 --top-k 4 --tokens-per-rank 256)
expect(counts_family 0 "" counts --synthetic hot-ranks --ep 8 ${skew_shape} -o ${skew_counts})
expect(counts_stdout 0 "\"num_ranks\":8" counts --synthetic zipf-1.2 --ep 8 ${skew_shape})
cli_requires(counts_family)
expect(counts_plan 0 "plan is valid" plan --counts ${skew_counts} --policy iser --slots 2 --validate)
cli_requires(counts_family)
expect(bound_table 0 "iser " bound --counts ${skew_counts} --slots 2 --time-limit 1)
cli_requires(counts_family)
expect(bound_line 0 "R >= " bound --counts ${skew_counts} --slots 2 --time-limit 1 --policies none)
expect(bound_missing nonzero "cannot open file" bound --counts ${skew_counts}.missing)
cli_requires(counts_family)
expect(bound_bad_policy nonzero "unknown policy 'nope'" bound --counts ${skew_counts} --policies nope)
expect(replay_family_bound 0 "Gap to the bound" replay --synthetic drift ${skew_shape} --ep 8
       --num-layers 1 --iterations 2 --policies iser,halo-q --bound 1 -q)
expect(replay_bad_family nonzero "unknown kind 'nope'" replay --synthetic nope -q)
expect(counts_bad_zipf nonzero "zipf-x" counts --synthetic zipf-x --ep 8 ${skew_shape})
