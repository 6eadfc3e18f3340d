"""One process per GPU (torchrun): the balancer bootstrapped over a torch.distributed NCCL
group and the Mixtral / Qwen2-MoE / DeepSeek-V3 blocks as EP blocks across the GPUs; skips
itself below 2 GPUs."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

WORKER = Path(__file__).with_name("dist_worker.py")


def test_torchrun_hf_blocks(iser_torch):
    gpus = torch.cuda.device_count()
    if gpus < 2:
        pytest.skip(f"{gpus} GPU(s); one process per GPU needs at least 2")
    if shutil.which("torchrun") is None:
        pytest.skip("torchrun not found")
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
               NVSHMEM_DISABLE_NVLS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent)] + sys.path)
    cmd = ["torchrun", "--standalone", f"--nproc-per-node={gpus}", str(WORKER)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert done.stdout.count("ok ") == 3 * gpus, done.stdout
