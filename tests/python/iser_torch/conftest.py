"""Shared set-up of the PyTorch tests: they need torch, a CUDA device and the built extension
(``iser/_torch_ops.so`` in the package or ``$ISER_TORCH_OPS``); each skips itself otherwise."""

import pytest

try:
    import torch
except ImportError:  # the fixtures skip
    torch = None


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skips itself without one)")


@pytest.fixture(scope="session")
def iser_torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    try:
        import iser.torch as it
    except ImportError as e:
        pytest.skip(f"iser.torch unavailable: {e}")
    return it


def skewed_ids(gen, n, num_ranks, tokens, top_k, num_experts, device, alpha=None, drop=0.02):
    """[n, P, T, k] distinct experts per token: Gumbel top-k over Zipf weights (exponent
    `alpha`, else random in [0, 1.5) per invocation; expert order random per invocation), a
    fraction `drop` of the ids set to -1."""
    if alpha is None:
        alpha = torch.rand(n, 1, 1, 1, generator=gen, device=device) * 1.5
    ranks = torch.argsort(torch.rand(n, num_experts, generator=gen, device=device), dim=1) + 1
    logw = (-alpha * torch.log(ranks.float())[:, None, None, :])
    u = torch.rand(n, num_ranks, tokens, num_experts, generator=gen, device=device)
    gumbel = -torch.log(-torch.log(u.clamp_min(1e-20)))
    ids = torch.topk(logw + gumbel, top_k, dim=-1).indices.to(torch.int32)
    dropped = torch.rand(ids.shape, generator=gen, device=device) < drop
    return torch.where(dropped, torch.full_like(ids, -1), ids)
