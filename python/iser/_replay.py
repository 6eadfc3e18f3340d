"""iser.replay: the main job (``iser replay``), returning exactly what ``--json`` writes.

The replay is the CLI's own code path: ``iser.replay(**flags)`` runs the packaged ``iser replay``
with those flags and returns the JSON it writes, so every flag, default and error message is the
CLI's, now and as the CLI grows. The replay itself is seconds of C++ on worker threads; starting
the process costs milliseconds, and the calling thread waits without holding the GIL."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Optional, Union

from . import _core
from ._cli import cli_path, flag_args
from ._core import Error

# Flags that choose where output goes: iser.replay returns the JSON itself.
_OUTPUT_FLAGS = ("json", "quiet", "q")


def policies() -> list[str]:
    """Names accepted by ``policy=`` / ``policies=``, in report order."""
    return _core.policies()


def replay(trace: Union[str, os.PathLike, None] = None, **flags: Any) -> dict[str, Any]:
    """Replays routing data through the balancing policies, like ``iser replay --json``.

    Keyword names are the CLI's long flags with ``_`` for ``-`` (``iser replay --help`` lists them
    all): ``ep=[8, 16]``, ``slots=4``, ``policies=["none", "eplb", "halo-q", "iser"]``,
    ``tokens_per_rank=8192``, ``iterations=``, ``seed=``, ``layers="3-39"`` or a list,
    ``synthetic="power-law"``, ``plan_trace=``, ``model=``, ... ``True`` gives a flag without a
    value (``validate=True``); lists become comma-separated values. ``trace`` is any routing file
    or directory the CLI reads; with neither ``trace`` nor ``synthetic`` the CLI's default source
    is replayed. Unset flags take the CLI's defaults. Returns the dict ``--json`` writes
    (``config``, ``trace``, ``results``, ...); a bad flag or input raises :class:`iser.Error` with
    the CLI's message. ``report=DIR``, ``csv=FILE`` and ``svg=FILE`` write those files as well.
    """
    for name in _OUTPUT_FLAGS:
        if name in flags:
            raise Error(f"'{name}' is implied: iser.replay returns the --json result")
    args = ["replay", "-q"]
    if trace is not None:
        args += ["--trace", os.fspath(trace)]
    args += flag_args(flags)
    with tempfile.TemporaryDirectory(prefix="iser-replay-") as tmp:
        out = Path(tmp) / "replay.json"
        done = subprocess.run([cli_path(), *args, "--json", str(out)], capture_output=True,
                              text=True, check=False)
        if done.returncode != 0:
            message = done.stderr.strip() or done.stdout.strip()
            raise Error(message.removeprefix("iser: error: "))
        return json.loads(out.read_text())
