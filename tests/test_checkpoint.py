import os, struct, subprocess, sys, textwrap
import pytest

from mqstore.checkpoint import (StoreCheckpoint, StoreLock, CHECKPOINT_SIZE, create_abort_file,
                                remove_abort_file, last_exit_ok, read_checkpoint_fields)
from mqstore.config import StoreConfig, FLUSH_SYNC
from mqstore.errors import CorruptFileError, StoreLockedError, ConfigError


def test_checkpoint_layout_is_rocketmq(tmp_path):
    cp = StoreCheckpoint(tmp_path / "checkpoint")
    cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp = 1, 2, 3
    cp.flush()
    cp.close()
    data = (tmp_path / "checkpoint").read_bytes()
    assert len(data) == CHECKPOINT_SIZE
    assert struct.unpack(">3q", data[:24]) == (1, 2, 3) and data[40:] == bytes(CHECKPOINT_SIZE - 40)
    again = StoreCheckpoint(tmp_path / "checkpoint")
    assert (again.physic_msg_timestamp, again.logics_msg_timestamp, again.index_msg_timestamp) == (1, 2, 3)


def test_min_timestamps():
    cp = StoreCheckpoint.__new__(StoreCheckpoint)
    cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp = 10_000, 8_000, 1_000
    assert cp.min_timestamp() == 5_000 and cp.min_timestamp_index() == 1_000
    cp.physic_msg_timestamp = 100
    assert cp.min_timestamp() == 0


def test_zero_length_checkpoint_reads_as_zeros(tmp_path):
    (tmp_path / "checkpoint").write_bytes(b"")
    cp = StoreCheckpoint(tmp_path / "checkpoint")
    assert cp.min_timestamp() == 0 and os.path.getsize(tmp_path / "checkpoint") == CHECKPOINT_SIZE


@pytest.mark.parametrize("content", [b"x" * 100, bytes(8192)])
def test_wrong_size_checkpoint_is_refused_untouched(tmp_path, content):
    p = tmp_path / "checkpoint"
    p.write_bytes(content)
    with pytest.raises(CorruptFileError, match="checkpoint"):
        StoreCheckpoint(p)
    assert p.read_bytes() == content


def test_negative_checkpoint_is_refused(tmp_path):
    p = tmp_path / "checkpoint"
    p.write_bytes(struct.pack(">q", -5) + bytes(CHECKPOINT_SIZE - 8))
    with pytest.raises(CorruptFileError, match="negative"):
        StoreCheckpoint(p)


def test_read_fields_pads_short_data():
    assert read_checkpoint_fields(struct.pack(">q", 7))["physic_msg_timestamp"] == 7


def test_abort_file_protocol(tmp_path):
    assert last_exit_ok(tmp_path)
    create_abort_file(tmp_path)
    assert not last_exit_ok(tmp_path) and (tmp_path / "abort").read_bytes() == b""
    remove_abort_file(tmp_path)
    assert last_exit_ok(tmp_path)


def test_lock_refuses_a_second_process(tmp_path):
    lock = StoreLock(tmp_path).acquire()
    assert (tmp_path / "lock").read_bytes() == b"lock"
    code = textwrap.dedent(f"""
        from mqstore.checkpoint import StoreLock
        from mqstore.errors import StoreLockedError
        try:
            StoreLock({str(tmp_path)!r}).acquire()
        except StoreLockedError:
            print("locked")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "locked"
    lock.release()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_config_defaults_are_rocketmq():
    c = StoreConfig()
    assert c.commit_log_file_size == 1 << 30 and c.consume_queue_file_size == 6_000_000
    assert c.index_file_size == 420_000_040 and c.flush_interval_ms == 500
    assert not c.sync_flush and StoreConfig.small(flush_disk_type=FLUSH_SYNC).sync_flush


@pytest.mark.parametrize("bad", [dict(flush_disk_type="SOMETIMES"), dict(commit_log_file_size=0),
                                 dict(consume_queue_units=-1), dict(commit_log_file_size=100)])
def test_config_rejects_bad_values(bad):
    with pytest.raises(ConfigError):
        StoreConfig(**bad)


# The broker's lock (a running RocketMQ broker holds FileChannel.tryLock(0, 1, false) on `lock`:
# on Linux a POSIX record lock on byte 0). Real child processes, no mocks.

BROKER = textwrap.dedent("""
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
    if sys.argv[2] == "record":
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)      # what a broker holds
    else:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)            # what an older mqstore held
    print("held", flush=True)
    sys.stdin.readline()
""")

TRY_BROKER = textwrap.dedent("""
    import errno, fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        print("started")
    except OSError as e:
        print("refused", errno.errorcode[e.errno])
""")


class Holder:
    "A child process holding a lock on `lock` until the block ends."
    def __init__(self, root, kind="record"):
        self.proc = subprocess.Popen([sys.executable, "-c", BROKER, str(root / "lock"), kind],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "held"
        self.pid = self.proc.pid

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.stdin.close()
        self.proc.wait(10)


def try_broker(root) -> str:
    return subprocess.run([sys.executable, "-c", TRY_BROKER, str(root / "lock")],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_a_broker_holding_the_lock_refuses_the_store(tmp_path):
    from mqstore.store import MessageStore
    cfg = StoreConfig.small()
    MessageStore.open(tmp_path, cfg).close()
    with Holder(tmp_path) as broker:
        with pytest.raises(StoreLockedError) as e:
            StoreLock(tmp_path).acquire()
        assert e.value.pid == broker.pid and str(broker.pid) in str(e.value)
        with pytest.raises(StoreLockedError) as e:
            MessageStore.open(tmp_path, cfg)
        assert e.value.pid == broker.pid
    MessageStore.open(tmp_path, cfg).close()          # the broker has gone: the store opens


def test_the_store_refuses_a_broker_while_open(tmp_path):
    from mqstore.store import MessageStore
    lock = StoreLock(tmp_path).acquire()
    assert try_broker(tmp_path) in ("refused EAGAIN", "refused EACCES")
    lock.release()
    assert try_broker(tmp_path) == "started"
    with MessageStore.open(tmp_path, StoreConfig.small()):
        assert try_broker(tmp_path) in ("refused EAGAIN", "refused EACCES")
    assert try_broker(tmp_path) == "started"


def test_a_second_lock_in_the_process_is_refused_and_keeps_the_broker_out(tmp_path):
    "A POSIX record lock dies with the first close of any descriptor of the file in its process."
    lock = StoreLock(tmp_path).acquire()
    for _ in range(2):
        with pytest.raises(StoreLockedError) as e:
            StoreLock(tmp_path).acquire()
        assert e.value.pid == os.getpid()
    assert try_broker(tmp_path) in ("refused EAGAIN", "refused EACCES")
    lock.release()
    again = StoreLock(tmp_path).acquire()            # released means released, in this process too
    again.release()


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="names flock holders from /proc/locks")
def test_a_flock_holder_is_named(tmp_path):
    with Holder(tmp_path, "flock") as holder:
        with pytest.raises(StoreLockedError) as e:
            StoreLock(tmp_path).acquire()
        assert e.value.pid == holder.pid
        assert try_broker(tmp_path) == "started"      # nothing held byte 0: the refused acquire let go


def test_read_only_opens_take_no_lock(tmp_path):
    "A read-only open must not take even a shared lock on byte 0: it would stop a broker starting."
    from mqstore.store import MessageStore
    from mqstore.message import Message
    cfg = StoreConfig.small()
    with MessageStore.open(tmp_path, cfg) as store:
        store.put(Message("T", b"x"))
    with Holder(tmp_path):
        with MessageStore.open(tmp_path, cfg, read_only=True) as ro:
            assert ro.commit_log.max_offset > 0
    with MessageStore.open(tmp_path, cfg, read_only=True):
        assert try_broker(tmp_path) == "started"


def test_a_forked_child_is_refused_naming_its_parent(tmp_path):
    "A child forked from the holder holds no record lock of its own: its attempt names the parent."
    lock = StoreLock(tmp_path).acquire()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                       # the child
        try:
            StoreLock(tmp_path).acquire()
            answer = b"acquired"
        except StoreLockedError as e:
            answer = str(e.pid).encode()
        os.write(w, answer)
        os._exit(0)
    os.close(w)
    answer = os.read(r, 64).decode()
    os.close(r)
    os.waitpid(pid, 0)
    assert answer == str(os.getpid())
    assert try_broker(tmp_path) in ("refused EAGAIN", "refused EACCES")   # the child's close dropped nothing
    lock.release()
