"""iser.model: the analytic models of ``iser model`` (copy hiding, broadcast algorithms, layer-time
projection). They are closed-form and cheap, so they run the bundled CLI and return its JSON."""

from __future__ import annotations

from typing import Any

from ._cli import flag_args, run_cli_json
from ._core import Error

_COMMANDS = ("overlap", "broadcast", "project")


def model(command: str, **flags: Any) -> Any:
    """Runs ``iser model COMMAND --FLAG VALUE ... --json`` and returns what it prints.

    ``command`` is ``"overlap"``, ``"broadcast"`` or ``"project"``; keyword names are the CLI's
    long flags with ``_`` for ``-`` (``tokens_per_rank=8192``), ``True`` for a flag without a
    value, lists for comma-separated values. Example::

        iser.model("overlap", hw="GB300", model="deepseek-v4-pro", ep=8, tokens_per_rank=8192,
                   copies=4)
    """
    if command not in _COMMANDS:
        raise Error(f"unknown model '{command}' (expected one of {', '.join(_COMMANDS)})")
    if "json" in flags:
        raise Error("'json' is implied: iser.model always returns the JSON result")
    return run_cli_json(["model", command, *flag_args(flags), "--json"])
