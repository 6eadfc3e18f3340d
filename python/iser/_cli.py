"""The ``iser`` command: the CLI binary shipped inside the package (``iser/bin/iser``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

from ._core import Error


def cli_path() -> str:
    """Path of the bundled ``iser`` CLI binary."""
    path = Path(__file__).parent / "bin" / "iser"
    if not path.is_file():
        raise Error(f"{path}: the iser CLI is missing from the installed package")
    return str(path)


def flag_args(flags: dict[str, Any]) -> list[str]:
    """Keyword arguments -> CLI flags: ``tokens_per_rank=8192`` -> ``--tokens-per-rank 8192``,
    ``True`` -> the bare flag, ``None`` / ``False`` -> nothing, lists -> comma-separated values."""
    args: list[str] = []
    for key, value in flags.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif isinstance(value, (list, tuple)):
            args += [flag, ",".join(str(v) for v in value)]
        else:
            args += [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    return args


def run_cli_json(args: Sequence[str]) -> Any:
    """Runs the bundled CLI with ``args`` (which ask for JSON on stdout) and parses its output;
    a failing command raises iser.Error with the CLI's message."""
    done = subprocess.run([cli_path(), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        message = done.stderr.strip() or done.stdout.strip()
        raise Error(message.removeprefix("iser: error: "))
    return json.loads(done.stdout)


def main() -> None:
    """Entry point of the ``iser`` console script: replaces this process with the CLI."""
    path = cli_path()
    os.execv(path, [path, *sys.argv[1:]])
