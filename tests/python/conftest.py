"""Shared fixtures for orbit's Python tests.

Environment:
  ORBIT_CLI         path to the built `orbit` executable (tests that need it skip when unset)
  ORBIT_MODELS_DIR  directory holding the bundled models (default: <repo>/models)
"""
import os
import pathlib

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def repo_root() -> pathlib.Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def models_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("ORBIT_MODELS_DIR", REPO_ROOT / "models"))


@pytest.fixture(scope="session")
def stories260k_path(models_dir) -> pathlib.Path:
    path = models_dir / "stories260K" / "stories260K.bin"
    if not path.is_file():
        pytest.fail(f"bundled model missing: {path} (set ORBIT_MODELS_DIR to the models directory)")
    return path


@pytest.fixture(scope="session")
def orbit_cli() -> pathlib.Path:
    value = os.environ.get("ORBIT_CLI")
    if not value:
        pytest.skip("ORBIT_CLI is not set: point it at the built `orbit` executable (e.g. build/cli/orbit)")
    path = pathlib.Path(value)
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.fail(f"ORBIT_CLI={value} is not an executable file")
    return path
