import os
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
VECTORS = ROOT.parent / "shared" / "vectors" / "rocketmq"


@pytest.fixture(scope="session")
def vectors() -> Path:
    "The folder of files written by RocketMQ's own Java classes."
    if not VECTORS.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"RocketMQ vectors missing at {VECTORS}")
        pytest.skip(f"RocketMQ vectors not found at {VECTORS}")
    return VECTORS
