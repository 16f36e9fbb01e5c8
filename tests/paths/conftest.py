"""Fixtures for the paths tests: a small valid pathmap that tests mutate, and the repository's pathmaps."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PATHMAPS = REPO / "pathmaps"

BASE = (Path(__file__).parent / "base.yaml").read_text()


@pytest.fixture
def base_text() -> str:
    return BASE


@pytest.fixture
def pathmaps_dir() -> Path:
    return PATHMAPS


@pytest.fixture
def inputs_dir() -> Path:
    return PATHMAPS / "inputs"
