"""The installed package passes ``mypy --strict`` (skipped where mypy is not installed)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

import dq_client


def test_mypy_strict() -> None:
    pytest.importorskip("mypy")
    # By module name, from an empty directory: the installed package as a
    # user's code sees it (a path inside site-packages would make mypy take
    # the files around it for the user's own).
    with tempfile.TemporaryDirectory() as empty:
        r = subprocess.run(
            [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "-p", "dq_client"],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=empty,
        )
    assert r.returncode == 0, r.stdout + r.stderr


def test_py_typed_shipped() -> None:
    assert os.path.exists(os.path.join(os.path.dirname(dq_client.__file__), "py.typed"))
