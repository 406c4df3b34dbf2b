from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def vectors() -> Path:
    "The folder of files written by RocketMQ's own Java classes (book/data/rocketmq); missing is a failure."
    from mqstore.vectors import rocketmq_vectors
    try:
        return rocketmq_vectors()
    except FileNotFoundError as e:
        pytest.fail(str(e))
