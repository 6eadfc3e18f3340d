"""Shared fixtures: the `iser` CLI the Python results are compared with.

The CLI is the one on PATH (the package's own console script once `pip install .` ran), or
$ISER_CLI when set (e.g. a build tree's binary)."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _cli_path() -> str:
    path = os.environ.get("ISER_CLI") or shutil.which("iser")
    if not path:
        pytest.fail("no `iser` command on PATH (pip install . puts it there) and ISER_CLI unset")
    return path


class Cli:
    def __init__(self, path: str):
        self.path = path

    def run(self, *args, check=True):
        done = subprocess.run([self.path, *map(str, args)], capture_output=True, text=True)
        if check and done.returncode != 0:
            raise AssertionError(f"iser {' '.join(map(str, args))} failed:\n{done.stderr}")
        return done

    def json(self, *args):
        return json.loads(self.run(*args).stdout)

    def error(self, *args) -> str:
        done = self.run(*args, check=False)
        assert done.returncode != 0, f"iser {' '.join(map(str, args))} succeeded"
        return done.stderr.strip().removeprefix("iser: error: ")


@pytest.fixture(scope="session")
def cli() -> Cli:
    return Cli(_cli_path())


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO
