"""iser's communicator bootstrapped over a torch.distributed group: a 1-rank gloo group on the
current GPU (the unique id travels through the group), the peer memory it reports (an NCCL window,
or CUDA IPC as asked) and the multicast reason."""

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu


@pytest.fixture
def one_rank_group(iser_torch, tmp_path):
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a default process group already exists in this process")
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def test_unique_id_travels_through_the_group(iser_torch, one_rank_group):
    num_ranks, rank, unique_id = iser_torch.unique_id_from_group(one_rank_group)
    assert (num_ranks, rank) == (1, 0)
    assert len(unique_id) == 256 and int(unique_id, 16) >= 0  # 128 bytes as hex


def test_peer_memory_report_over_the_group(iser_torch, one_rank_group, monkeypatch):
    monkeypatch.delenv("ISER_PEER_MEMORY", raising=False)
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    ipc = iser_torch.peer_memory_report(one_rank_group, peer_memory="ipc")
    assert ipc.startswith("peer memory: ipc (CUDA IPC handles, as asked); multicast unavailable: ")
    auto = iser_torch.peer_memory_report(one_rank_group, multicast=True)
    assert "multicast unavailable: " in auto and "NCCL_NVLS_ENABLE=0" in auto
    if auto.startswith("peer memory: nccl (NCCL symmetric window, LSA peer pointers"):
        assert "LSA team of 1 rank" in auto
        nccl = iser_torch.peer_memory_report(one_rank_group, peer_memory="nccl")
        assert nccl.startswith("peer memory: nccl ("), nccl
    else:  # NCCL gave this communicator no window: auto says why, nccl is refused with it
        assert auto.startswith("peer memory: ipc (CUDA IPC handles: rank 0 cannot use an NCCL "
                               "window: "), auto
        with pytest.raises(RuntimeError, match="peer memory 'nccl' asked for"):
            iser_torch.peer_memory_report(one_rank_group, peer_memory="nccl")
    monkeypatch.setenv("ISER_PEER_MEMORY", "ipc")
    assert iser_torch.peer_memory_report(one_rank_group).startswith("peer memory: ipc (")


def test_bad_peer_memory_is_refused(iser_torch, one_rank_group):
    with pytest.raises(RuntimeError, match="peer memory: unknown value 'nvshmem'"):
        iser_torch.peer_memory_report(one_rank_group, peer_memory="nvshmem")


def test_logical_balancer_reports_local_memory(iser_torch):
    weights = [torch.zeros(8, 64, device="cuda")]
    bal = iser_torch.SlotBalancer(8, 2, weights, max_tokens=8, top_k=2, logical=2)
    assert bal.describe().startswith("peer memory: local (2 logical ranks in one allocation"), (
        bal.describe()
    )
    assert "; multicast unavailable: " in bal.describe()
