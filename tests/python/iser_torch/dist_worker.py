"""torchrun worker of test_distributed.py: every rank builds the same HF blocks, computes its
tokens through the EP block over the world group and checks them against the HF block."""

import os

import torch
import torch.distributed as dist

import iser.torch as it
from test_hf import TOL, deepseek_v3, init_block, mixtral, qwen2_moe


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
    tokens = 48
    for factory in (mixtral, qwen2_moe, deepseek_v3):
        gen = torch.Generator(device="cuda").manual_seed(17)
        block = factory(8 * world).cuda()
        direction = torch.randn(64, generator=gen, device="cuda")
        init_block(block, gen, [0, 1], direction)
        block = block.eval()
        x = torch.randn(world * tokens, 64, generator=gen, device="cuda") * 0.5 + direction
        mine = x[rank * tokens : (rank + 1) * tokens]
        with torch.no_grad():
            want = block(x[None])[0][rank * tokens : (rank + 1) * tokens]
            ep = it.ep_from_hf(block, group=dist.group.WORLD, num_slots=2, max_tokens=tokens)
            on = ep(mine)
            off = ep(mine, balance=False)
        assert torch.equal(on, off), f"rank {rank} {factory.__name__}: ON != OFF"
        torch.testing.assert_close(on, want, **TOL[torch.float32])
        assert ep.balancer.stats()["ready_failures"] == 0
        print(f"ok {factory.__name__} rank {rank}", flush=True)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
