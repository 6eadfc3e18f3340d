# iser eplb: DeepSeek's README example and bad inputs.
set(eplb_data ${SRC}/tests/cli/data)
expect(eplb_readme 0
       "\"phy2log\": [[5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1], [7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1]]"
       eplb --weight ${eplb_data}/eplb_readme.json --replicas 16 --groups 4 --nodes 2 --gpus 8)
expect(eplb_readme_logcnt 0
       "\"logcnt\": [[1, 2, 1, 1, 2, 2, 1, 1, 1, 1, 2, 1], [1, 2, 1, 1, 1, 2, 2, 1, 2, 1, 1, 1]]"
       eplb --weight ${eplb_data}/eplb_readme.json --replicas 16 --groups 4 --nodes 2 --gpus 8)
expect(eplb_readme_log2phy 0
       "\"log2phy\": [[[12, -1], [15, 13], [11, -1], [6, -1], [7, 5], [0, 2], [1, -1], [3, -1], [4, -1], [9, -1], [8, 10], [14, -1]], "
       eplb --weight ${eplb_data}/eplb_readme.json --replicas 16 --groups 4 --nodes 2 --gpus 8)
# Groups that do not divide nodes: the global policy (same as one group on one node).
expect(eplb_global 0 "\"phy2log\": [[10, 6, 10, 7, 0, 2, 11, 4, 5, 9, 5, 4, 8, 3, 1, 1], "
       eplb --weight ${eplb_data}/eplb_readme.json --replicas 16 --groups 3 --nodes 2 --gpus 8)
expect(eplb_replicas_not_multiple nonzero "replicas = 18 is not a multiple of gpus = 8"
       eplb --weight ${eplb_data}/eplb_readme.json --replicas 18 --groups 4 --nodes 2 --gpus 8)
expect(eplb_too_few_replicas nonzero "invalid replicas = 8"
       eplb --weight ${eplb_data}/eplb_readme.json --replicas 8 --gpus 8)
expect(eplb_groups_not_dividing_experts nonzero "experts = 12 is not a multiple of groups = 5"
       eplb --weight ${eplb_data}/eplb_readme.json --replicas 16 --groups 5 --nodes 5 --gpus 8)
expect(eplb_gpus_not_multiple_of_nodes nonzero "gpus = 2 is not a multiple of nodes = 4"
       eplb --weight ${eplb_data}/eplb_readme.json --replicas 16 --groups 4 --nodes 4 --gpus 2)
expect(eplb_zero_gpus nonzero "invalid gpus = 0"
       eplb --weight ${eplb_data}/eplb_readme.json --replicas 16 --gpus 0)
expect(eplb_ragged nonzero "weight[1] has 2 experts, but weight[0] has 3"
       eplb --weight ${eplb_data}/eplb_ragged.json --replicas 4 --gpus 2)
expect(eplb_negative nonzero "weight[0][2] = -3 is negative"
       eplb --weight ${eplb_data}/eplb_negative.json --replicas 4 --gpus 2)
expect(eplb_not_a_number nonzero "weight[0][2] = \"x\" is not a number"
       eplb --weight ${eplb_data}/eplb_string.json --replicas 4 --gpus 2)
expect(eplb_missing_field nonzero "expected an object with a field \"weight\""
       eplb --weight ${eplb_data}/eplb_nofield.json --replicas 4 --gpus 2)
expect(eplb_bad_json nonzero "not valid JSON"
       eplb --weight ${eplb_data}/eplb_truncated.json --replicas 4 --gpus 2)
expect(eplb_missing_file nonzero "cannot open the weight file"
       eplb --weight ${eplb_data}/no-such-file.json --replicas 4 --gpus 2)
expect(eplb_missing_option nonzero "--replicas is required"
       eplb --weight ${eplb_data}/eplb_readme.json --gpus 8)
