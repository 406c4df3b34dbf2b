import os
import pytest
from mqstore.errors import MQStoreError, SegmentExistsError
from hypothesis import given, settings, strategies as st

from mqstore.errors import (SegmentFullError, SegmentNameError, SegmentSizeError,
                            OffsetOutOfRangeError, StoreClosedError, ConfigError, MQStoreError)
from mqstore.mapped_file import (MappedFile, offset_to_name, name_to_offset, able_to_flush,
                                 flush_range, OS_PAGE_SIZE)


def test_names_round_trip():
    assert offset_to_name(0) == "0" * 20
    assert offset_to_name(1073741824) == "00000000001073741824"
    assert name_to_offset("00000000000006000000") == 6_000_000
    assert len(offset_to_name(2**63 - 1)) == 19 + 0 or len(offset_to_name(2**63 - 1)) == 20


@pytest.mark.parametrize("bad", ["abort", "123", "0000000000000000000x", "", "0" * 21])
def test_bad_names(bad):
    with pytest.raises(SegmentNameError, match="segment name"):
        name_to_offset(bad)


def test_negative_offset_name():
    with pytest.raises(ConfigError):
        offset_to_name(-1)


def test_create_preallocates_and_names(tmp_path):
    mf = MappedFile.create(tmp_path, 8192, 4096)
    assert mf.path.name == "00000000000000008192" and mf.file_from_offset == 8192
    assert os.path.getsize(mf.path) == 4096
    assert (mf.wrote_position, mf.committed_position, mf.flushed_position) == (0, 0, 0)
    mf.close()


def test_create_refuses_to_overwrite(tmp_path):
    MappedFile.create(tmp_path, 0, 4096).append(b"keep")
    with pytest.raises(FileExistsError):
        MappedFile.create(tmp_path, 0, 4096)
    with pytest.raises(SegmentExistsError, match=offset_to_name(0)) as e:       # a named mqstore error
        MappedFile.create(tmp_path, 0, 4096)
    assert isinstance(e.value, MQStoreError) and e.value.path == tmp_path / offset_to_name(0)
    assert (tmp_path / offset_to_name(0)).read_bytes()[:4] == b"keep"


def test_append_read_and_positions(tmp_path):
    mf = MappedFile.create(tmp_path, 0, 4096)
    assert mf.append(b"abc") == 0 and mf.append(b"defg") == 3
    assert mf.read(0, 7) == b"abcdefg" and mf.read_position == 7
    with pytest.raises(OffsetOutOfRangeError):
        mf.read(5, 3)
    with pytest.raises(OffsetOutOfRangeError):
        mf.read(-1, 1)


def test_refused_append_changes_nothing(tmp_path):
    mf = MappedFile.create(tmp_path, 0, 4096)
    mf.append(b"x" * 4000)
    with pytest.raises(SegmentFullError, match="do not fit"):
        mf.append(b"y" * 97)
    assert mf.wrote_position == 4000 and mf.read(3990, 10) == b"x" * 10
    assert bytes(mf._mm[4000:4096]) == bytes(96)
    mf.append(b"z" * 96)
    assert mf.is_full()


def test_seal_marks_full(tmp_path):
    mf = MappedFile.create(tmp_path, 0, 4096)
    mf.append(b"a" * 10)
    assert mf.seal(b"END!") == 10
    assert mf.is_full() and mf.read(10, 4) == b"END!"


def test_flush_rules_follow_rocketmq():
    assert able_to_flush(0, 1, 4096, 0)
    assert not able_to_flush(5, 5, 4096, 0)
    assert not able_to_flush(0, 4095, 1 << 20, 1)
    assert able_to_flush(0, 4096, 1 << 20, 1)
    assert not able_to_flush(4095, 8191, 1 << 20, 2)
    assert able_to_flush(100, 4096, 4096, 4)      # a full file always flushes
    assert flush_range(5000, 9000) == (4096, 4904)


def test_flush_persists_to_the_file(tmp_path):
    mf = MappedFile.create(tmp_path, 0, 4 * OS_PAGE_SIZE)
    mf.append(b"durable" * 100)
    assert mf.flush(least_pages=1) == 0           # not a whole page yet
    assert mf.flush(least_pages=0) == 700 and mf.flush_count == 1
    assert mf.flush(least_pages=0) == 700 and mf.flush_count == 1
    with open(mf.path, "rb") as f:
        assert f.read(7) == b"durable"


def test_open_checks_size(tmp_path):
    p = tmp_path / offset_to_name(0)
    p.write_bytes(bytes(100))
    with pytest.raises(SegmentSizeError, match="length 100"):
        MappedFile(p, 4096)
    assert p.stat().st_size == 100


def test_closed_file_refuses(tmp_path):
    mf = MappedFile.create(tmp_path, 0, 4096)
    mf.close()
    with pytest.raises(StoreClosedError):
        mf.append(b"x")
    mf.close()  # idempotent


def test_closed_file_refuses_every_operation(tmp_path):
    "A closed file refuses reads, writes and position changes alike (commit and set_positions included)."
    from mqstore.mapped_file import TransientMappedFile
    for cls in (MappedFile, TransientMappedFile):
        mf = cls.create(tmp_path / cls.__name__, 0, 4096)
        mf.append(b"abc")
        mf.commit(0)
        mf.close()
        for op in (lambda: mf.append(b"x"), lambda: mf.read(0, 1), lambda: mf.view(), lambda: mf.write_at(0, b"x"),
                   lambda: mf.flush(0), lambda: mf.force(), lambda: mf.commit(0), lambda: mf.set_positions(0),
                   lambda: mf.seal(), lambda: mf.warm()):
            with pytest.raises(StoreClosedError):
                op()
        assert mf.wrote_position == mf.committed_position == 3


def test_warm_keeps_data_and_destroy_deletes(tmp_path):
    mf = MappedFile.create(tmp_path, 0, 4 * OS_PAGE_SIZE)
    mf.append(b"data")
    mf.warm()
    assert mf.read(0, 4) == b"data"
    mf.destroy()
    assert not any(tmp_path.iterdir())


def test_errors_share_a_base():
    assert issubclass(SegmentFullError, MQStoreError)
    assert issubclass(OffsetOutOfRangeError, LookupError)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(min_size=0, max_size=700), max_size=30))
def test_appends_read_back(tmp_path_factory, chunks):
    folder = tmp_path_factory.mktemp("mf")
    mf = MappedFile.create(folder, 0, 8192)
    written = bytearray()
    for c in chunks:
        if len(c) > mf.free_space():
            with pytest.raises(SegmentFullError):
                mf.append(c)
            continue
        assert mf.append(c) == len(written)
        written += c
    assert mf.read(0, len(written)) == bytes(written)
    mf.flush(0)
    mf.close()
    reopened = MappedFile(folder / offset_to_name(0), 8192)
    assert reopened.read_position == 0
    reopened.set_positions(len(written))
    assert reopened.read(0, len(written)) == bytes(written)
    reopened.close()


def test_force_range_calls_msync_on_the_range(tmp_path, monkeypatch):
    "flush and force msync exactly their page-aligned ranges, through ctypes (which releases the GIL)."
    import ctypes, sys
    from mqstore import mapped_file
    mf = MappedFile.create(tmp_path, 0, 64 * 1024)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mf._mm))
    calls, real = [], mapped_file._msync
    if real is not None:
        monkeypatch.setattr(mapped_file, "_msync", lambda a, n, f: (calls.append((a - base, n, f)), real(a, n, f))[1])
    mf.append(b"a" * 5000)
    assert mf.flush(0) == 5000
    mf.append(b"b" * 10)
    assert mf.flush(0) == 5010
    mf.force()
    if sys.platform.startswith("linux"):
        assert calls == [(0, 5000, 4), (4096, 914, 4), (0, 64 * 1024, 4)]
    with open(mf.path, "rb") as again:
        assert os.pread(again.fileno(), 5010, 0) == b"a" * 5000 + b"b" * 10
    mf.close()                                   # no buffer of the map was left exported


def test_warm_on_a_reopened_file_keeps_its_data(tmp_path):
    "Issue 25 item 5: warm() on a file found on disk (not created by this object) writes nothing."
    size = 16 * 1024
    mf = MappedFile.create(tmp_path, 0, size)
    data = bytes((i % 251) + 1 for i in range(size))     # no zero byte anywhere
    mf.append(data)
    mf.flush()
    mf.close()
    path = tmp_path / offset_to_name(0)
    os.utime(path, ns=(10**18, 10**18))                  # any write fault moves it to now
    before = os.stat(path).st_mtime_ns
    again = MappedFile(path, size)
    again.warm()
    again.close()
    assert path.read_bytes() == data
    assert os.stat(path).st_mtime_ns == before


def test_warm_on_a_read_only_map_reads_only(tmp_path):
    size = 8192
    mf = MappedFile.create(tmp_path, 0, size)
    mf.append(b"\x07" * size); mf.flush(); mf.close()
    ro = MappedFile(tmp_path / offset_to_name(0), size, writable=False)
    ro.warm()
    ro.close()
    assert (tmp_path / offset_to_name(0)).read_bytes() == b"\x07" * size


def test_read_only_map_forces_nothing_and_refuses_writes(tmp_path):
    """Issue 28: force() on a read-only map raised TypeError (from ctypes); now flush and force do nothing and
    every write is refused with StoreStateError, which names the file."""
    from mqstore.errors import StoreStateError
    from mqstore.mapped_file import TransientMappedFile, FLUSH_LISTENERS
    size = 8192
    mf = MappedFile.create(tmp_path, 0, size)
    mf.append(b"\x07" * size); mf.flush(); mf.close()
    path = tmp_path / offset_to_name(0)
    forced = []
    FLUSH_LISTENERS.append(lambda p, start, length: forced.append((p, start, length)))
    try:
        for cls in (MappedFile, TransientMappedFile):
            ro = cls(path, size, writable=False)
            ro.set_positions(100)
            assert ro.flush(0) == 100
            ro.force()
            for op in (lambda: ro.append(b"x"), lambda: ro.write_at(0, b"x"), lambda: ro.seal()):
                with pytest.raises(StoreStateError, match=offset_to_name(0)):
                    op()
            assert ro.wrote_position == 100 and ro.commit(0) == 100
            ro.close()
    finally:
        FLUSH_LISTENERS.pop()
    assert forced == [] and path.read_bytes() == b"\x07" * size


@pytest.mark.parametrize("bad", ["²" * 20, "\u0661" * 20, "\uff11" * 20])   # superscript, Arabic-Indic, fullwidth
def test_non_ascii_digit_names_are_not_segments(bad):
    # str.isdigit accepts these; name_to_offset must still raise SegmentNameError, not ValueError or a number
    with pytest.raises(SegmentNameError, match="segment name"):
        name_to_offset(bad)


def test_close_frees_a_view_that_only_a_reference_cycle_keeps(tmp_path):
    "A numpy view left in a reference cycle (a traceback, a batch object) must not make close() fail."
    import gc
    import numpy as np
    p = tmp_path / "00000000000000000000"
    with open(p, "wb") as f:
        f.truncate(4096)
    mf = MappedFile(p, 4096)
    a, b = {}, {}
    a["other"], b["other"], a["view"] = b, a, np.frombuffer(mf._mm, np.uint8)
    del a, b
    gc.disable()                                   # the cycle stays until close collects it
    try:
        mf.close()
    finally:
        gc.enable()
    assert mf.closed
    mf2 = MappedFile(p, 4096)
    held = memoryview(mf2._mm)                     # a view still in use: close refuses, the map stays usable
    with pytest.raises(BufferError):
        mf2.close()
    held.release()
    mf2.close()
    assert mf2.closed
