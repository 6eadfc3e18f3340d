"""iser: per-invocation replication of hot experts for load balancing in expert-parallel MoE layers.

The API mirrors the ``iser`` command line: one function per subcommand, keyword names are the
CLI's long flags with ``_`` for ``-``, results are exactly what ``--json`` prints (dicts and NumPy
arrays). Errors raise :class:`iser.Error` (a ``ValueError``) with the CLI's message.

    >>> import numpy as np, iser
    >>> counts = np.random.default_rng(0).integers(0, 100, size=(8, 64))
    >>> p = iser.plan(counts, slots=2, policy="iser")
    >>> p.loads.max() <= counts.sum(axis=0).reshape(8, 8).sum(axis=1).max()
    True
"""

from ._core import Error, Plan, __version__, counts_from_topk, plan, rewrite
from ._cli import cli_path
from ._eplb import eplb
from ._model import model
from ._replay import policies, replay
from ._trace import Trace, bundled_trace, convert, read_trace, write_trace

Error.__module__ = "iser"
Plan.__module__ = "iser"

__all__ = [
    "Error",
    "Plan",
    "Trace",
    "__version__",
    "bundled_trace",
    "cli_path",
    "convert",
    "counts_from_topk",
    "eplb",
    "model",
    "plan",
    "policies",
    "read_trace",
    "replay",
    "rewrite",
    "write_trace",
]
