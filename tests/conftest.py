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


@pytest.fixture(scope="session")
def vectors5() -> Path:
    "The eight store roots RocketMQ 5.x wrote (book/data/rocketmq5); missing is a failure. Copy before opening."
    from mqstore.vectors import rocketmq5_vectors
    try:
        return rocketmq5_vectors()
    except FileNotFoundError as e:
        pytest.fail(str(e))


GEOMETRY5 = ("mappedFileSizeCommitLog=65536\nmappedFileSizeConsumeQueue=1280\nmaxHashSlotNum=64\nmaxIndexNum=256\n"
             "maxMessageSize=16384\nmapperFileSizeBatchConsumeQueue=2944\n")


@pytest.fixture
def broker_conf5(tmp_path) -> str:
    "A broker.conf with the geometry the eight 5.x stores were written with (their README)."
    path = tmp_path / "broker-geometry.conf"
    path.write_text(GEOMETRY5)
    return str(path)


@pytest.fixture
def shadow_disk(tmp_path):
    """Chapter 8's power-loss model around a test: a live folder, its shadow disk, and the listener
    that copies every flushed range to the disk (removed afterwards). Yields (live, disk)."""
    from mqstore.crash import ShadowDisk, prepare_disk
    from mqstore.mapped_file import FLUSH_LISTENERS
    live, disk = tmp_path / "live", tmp_path / "disk"
    live.mkdir()
    prepare_disk(live, disk)
    shadow = ShadowDisk(live, disk)
    FLUSH_LISTENERS.append(shadow)
    try:
        yield live, disk
    finally:
        FLUSH_LISTENERS.remove(shadow)
