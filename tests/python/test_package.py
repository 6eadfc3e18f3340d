"""The installed package: the `iser` command on PATH, the bundled data inside the package."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import iser


def test_cli_on_path():
    path = shutil.which("iser")
    assert path, "`iser` is not on PATH"
    done = subprocess.run([path, "--version"], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == f"iser {iser.__version__}"


def test_bundled_data_found_inside_the_package(tmp_path):
    package = Path(iser.__file__).parent
    env = {k: v for k, v in os.environ.items() if k != "ISER_DATA_DIR"}
    probe = "import iser; print(iser.bundled_trace())"
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env,
                          capture_output=True, text=True, check=True)
    path = Path(done.stdout.strip())
    assert path.is_file()
    assert package in path.parents, f"{path} is not the package's copy"


def test_typing_files_ship():
    package = Path(iser.__file__).parent
    assert (package / "py.typed").is_file() and (package / "_core.pyi").is_file()
    assert iser.plan.__doc__ and iser.replay.__doc__ and iser.eplb.__doc__
