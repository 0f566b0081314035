"""The installed package passes ``mypy --strict`` (skipped where mypy is not installed)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import dq_client


def test_mypy_strict() -> None:
    pytest.importorskip("mypy")
    pkg = os.path.dirname(dq_client.__file__)
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", pkg],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_py_typed_shipped() -> None:
    assert os.path.exists(os.path.join(os.path.dirname(dq_client.__file__), "py.typed"))
