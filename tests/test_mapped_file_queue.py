import os
import warnings
import re
import pytest
from hypothesis import given, settings, strategies as st

from mqstore.errors import (SegmentNameError, SegmentSizeError, SegmentGapError,
                            OffsetOutOfRangeError, SegmentFullError)
from mqstore.mapped_file import offset_to_name
from mqstore.mapped_file_queue import MappedFileQueue, segment_index

SIZE = 1024


def write_stream(q, chunks):
    "Append chunks, sealing a file when the next chunk does not fit; return the chunk offsets."
    offsets = []
    for c in chunks:
        mf = q.last_file(create=True)
        if len(c) > mf.free_space():
            mf.seal()
            mf = q.last_file(create=True)
        offsets.append(mf.file_from_offset + mf.append(c))
    return offsets


def snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_empty_queue(tmp_path):
    q = MappedFileQueue(tmp_path / "none", SIZE).load()
    assert q.files == [] and q.min_offset == 0 and q.max_offset == 0
    with pytest.raises(OffsetOutOfRangeError):
        q.find_by_offset(0)


def test_first_file_rounds_down(tmp_path):
    q = MappedFileQueue(tmp_path, SIZE)
    mf = q.last_file(start_offset=5000, create=True)
    assert mf.file_from_offset == 4096 and q.min_offset == 4096


def test_roll_and_find(tmp_path):
    q = MappedFileQueue(tmp_path, SIZE)
    offs = write_stream(q, [b"x" * 300] * 10)
    assert [mf.file_from_offset for mf in q.files] == [0, 1024, 2048, 3072]
    for o in offs:
        assert q.find_by_offset(o).file_from_offset == o - o % SIZE
    with pytest.raises(OffsetOutOfRangeError):
        q.find_by_offset(4096)


def test_load_sets_positions_to_full_size(tmp_path):
    q = MappedFileQueue(tmp_path, SIZE)
    write_stream(q, [b"abc"] * 3)
    q.close()
    q2 = MappedFileQueue(tmp_path, SIZE).load()
    assert q2.max_offset == SIZE and q2.files[0].wrote_position == SIZE


def test_load_refuses_bad_names_and_changes_nothing(tmp_path):
    (tmp_path / offset_to_name(0)).write_bytes(bytes(SIZE))
    (tmp_path / "abort").write_bytes(b"")
    before = snapshot(tmp_path)
    with pytest.raises(SegmentNameError, match="abort"):
        MappedFileQueue(tmp_path, SIZE).load()
    assert snapshot(tmp_path) == before


def test_load_refuses_wrong_size_and_names_it(tmp_path):
    (tmp_path / offset_to_name(0)).write_bytes(bytes(SIZE))
    (tmp_path / offset_to_name(SIZE)).write_bytes(bytes(10))
    (tmp_path / offset_to_name(2 * SIZE)).write_bytes(b"")
    before = snapshot(tmp_path)
    with pytest.raises(SegmentSizeError, match=offset_to_name(SIZE)):
        MappedFileQueue(tmp_path, SIZE).load()
    assert snapshot(tmp_path) == before   # the empty last file is not removed either


def test_load_refuses_a_gap(tmp_path):
    (tmp_path / offset_to_name(0)).write_bytes(bytes(SIZE))
    (tmp_path / offset_to_name(2 * SIZE)).write_bytes(bytes(SIZE))
    with pytest.raises(SegmentGapError):
        MappedFileQueue(tmp_path, SIZE).load()


def test_zero_byte_last_file_is_removed_with_a_warning(tmp_path):
    (tmp_path / offset_to_name(0)).write_bytes(bytes(SIZE))
    (tmp_path / offset_to_name(SIZE)).write_bytes(b"")
    with pytest.warns(UserWarning, match="zero-byte"):
        q = MappedFileQueue(tmp_path, SIZE).load()
    assert len(q.files) == 1 and not (tmp_path / offset_to_name(SIZE)).exists()


def test_segment_index_bounds():
    assert segment_index(0, 0, 10, 1) == 0
    with pytest.raises(OffsetOutOfRangeError):
        segment_index(9, 10, 10, 2)
    with pytest.raises(OffsetOutOfRangeError):
        segment_index(30, 10, 10, 2)


def test_flush_walks_file_by_file(tmp_path):
    q = MappedFileQueue(tmp_path, SIZE)
    write_stream(q, [b"y" * 600] * 3)
    assert q.flush(0) and q.flushed_where == SIZE      # the sealed first file
    assert q.flush(0) and q.flushed_where == 2 * SIZE
    assert q.flush(0) and q.flushed_where == 2 * SIZE + 600
    assert not q.flush(0)


def test_delete_expired_by_time_keeps_the_last(tmp_path):
    q = MappedFileQueue(tmp_path, SIZE)
    write_stream(q, [b"t" * 700] * 4)
    assert q.delete_expired_by_time(0, now_ms=1e18) == 3
    assert len(q.files) == 1 and q.min_offset == 3 * SIZE
    assert q.delete_expired_by_time(10**9) == 0


def test_delete_expired_by_offset(tmp_path):
    q = MappedFileQueue(tmp_path, 40)  # two 20-byte units a file
    for i in range(6):
        q.last_file(create=True).append((i * 100).to_bytes(8, "big") + bytes(12))
    assert q.delete_expired_by_offset(250, unit_size=20) == 1
    assert q.min_offset == 40


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, SIZE), min_size=1, max_size=40), st.data())
def test_random_streams_find_and_truncate(tmp_path_factory, sizes, data):
    folder = tmp_path_factory.mktemp("q")
    q = MappedFileQueue(folder, SIZE)
    chunks = [bytes([i % 251 + 1]) * n for i, n in enumerate(sizes)]
    offs = write_stream(q, chunks)
    # find-by-offset returns the segment that holds every byte of every chunk
    for o, c in zip(offs, chunks):
        for probe in (o, o + len(c) - 1):
            mf = q.find_by_offset(probe)
            assert mf.file_from_offset <= probe < mf.file_from_offset + SIZE
    # truncate at a random offset: exactly the bytes before it stay readable
    cut = data.draw(st.integers(q.min_offset, q.max_offset))
    expected = {}
    for o, c in zip(offs, chunks):
        for i, b in enumerate(c):
            if o + i < cut:
                expected[o + i] = b
    q.truncate_dirty_files(cut)
    assert q.max_offset == cut or (cut % SIZE == 0 and q.max_offset in (cut, cut - SIZE + SIZE))
    for off, b in list(expected.items())[:: max(1, len(expected) // 200)]:
        assert q.find_by_offset(off).read(off % SIZE, 1) == bytes([b])
    last = q.last_file()
    if last is not None:
        pos = cut - last.file_from_offset
        if 0 <= pos < SIZE:
            assert bytes(last._mm[pos:]) == bytes(SIZE - pos)   # the tail is zeroed on disk
    q.close()
    # a reload sees no file past the cut
    q2 = MappedFileQueue(folder, SIZE).load()
    assert all(mf.file_from_offset <= cut for mf in q2.files)
    q2.close()


def test_flush_stops_when_the_last_file_is_exactly_full(tmp_path):
    "A queue whose last file is full and flushed has nothing more to flush (no loop, no step back)."
    q = MappedFileQueue(tmp_path, 48)
    for _ in range(4):
        q.last_file(create=True).append(bytes(24))
    rounds = 0
    while q.flush(0):
        rounds += 1
        assert rounds < 10
    assert rounds == 2 and q.flushed_where == 96
    assert not q.flush(0) and q.flushed_where == 96


# issue 14, item 6: offsets are signed 64-bit; a segment named at or past 2**63 is refused at load
@pytest.mark.parametrize("name", ["09223372036854775808", "99999999999999999999",
                                  offset_to_name(2**63 - SIZE // 2)])     # starts below, ends past
def test_load_refuses_a_segment_past_2_63_and_changes_nothing(tmp_path, name):
    (tmp_path / offset_to_name(0)).write_bytes(bytes(SIZE))
    (tmp_path / name).write_bytes(bytes(SIZE))
    before = snapshot(tmp_path)
    with pytest.raises(SegmentNameError, match=name):
        MappedFileQueue(tmp_path, SIZE).load()
    assert snapshot(tmp_path) == before


def test_a_segment_ending_exactly_at_2_63_loads(tmp_path):
    (tmp_path / offset_to_name(2**63 - SIZE)).write_bytes(bytes(SIZE))
    q = MappedFileQueue(tmp_path, SIZE).load()
    assert q.min_offset == 2**63 - SIZE and q.max_offset == 2**63
    q.close()


def test_a_store_with_a_segment_past_2_63_does_not_open(tmp_path):
    "The defect as a user met it: the store opened, then put failed with struct.error."
    from mqstore.config import StoreConfig
    from mqstore.message import Message
    from mqstore.store import MessageStore
    cfg = StoreConfig.small()
    with MessageStore.open(tmp_path, cfg) as store:
        store.put(Message("T", b"x"))
    folder = tmp_path / "commitlog"
    (folder / "09223372036854775808").write_bytes(bytes(cfg.commit_log_file_size))
    with pytest.raises(SegmentNameError, match="09223372036854775808"):
        MessageStore.open(tmp_path, cfg)


# issue 14, item 11: files that cannot be segments (a dot in the name) are ignored with a warning
@pytest.mark.parametrize("stray", [".DS_Store", "foo.tmp", "._00000000000000000000", ".lock",
                                   offset_to_name(SIZE) + ".bak"])
def test_load_ignores_stray_files_with_a_warning_that_names_them(tmp_path, stray):
    (tmp_path / offset_to_name(0)).write_bytes(bytes(SIZE))
    (tmp_path / stray).write_bytes(b"not a segment")
    with pytest.warns(UserWarning, match=re.escape(stray)):
        q = MappedFileQueue(tmp_path, SIZE).load()
    assert [mf.name for mf in q.files] == [offset_to_name(0)] and q.max_offset == SIZE
    assert (tmp_path / stray).read_bytes() == b"not a segment"
    q.close()


@pytest.mark.parametrize("name", ["1024", "0" * 21, "0" * 19, "README", "checkpoint",
                                  "\u0660" * 20, "0000000000000000102x"])
def test_only_twenty_ascii_digits_name_a_segment(tmp_path, name):
    (tmp_path / offset_to_name(0)).write_bytes(bytes(SIZE))
    (tmp_path / name).write_bytes(bytes(SIZE))
    with pytest.raises(SegmentNameError):
        MappedFileQueue(tmp_path, SIZE).load()


def test_a_store_with_a_ds_store_in_its_commitlog_opens(tmp_path):
    from mqstore.config import StoreConfig
    from mqstore.message import Message
    from mqstore.store import MessageStore
    cfg = StoreConfig.small()
    with MessageStore.open(tmp_path, cfg) as store:
        store.put(Message("T", b"x"))
    (tmp_path / "commitlog" / ".DS_Store").write_bytes(bytes(6148))
    with pytest.warns(UserWarning, match="DS_Store"):
        store = MessageStore.open(tmp_path, cfg)
    with store:
        assert store.get("T", 0, 0).messages[0].body == b"x"


def test_a_folder_not_starting_on_a_segment_boundary_is_refused(tmp_path):
    "Issue 25 item 4: 100 and 4196 are contiguous but not on 4096-byte boundaries."
    from mqstore.errors import SegmentAlignmentError
    size = 4096
    (tmp_path / offset_to_name(100)).write_bytes(b"\x01" * size)
    (tmp_path / offset_to_name(100 + size)).write_bytes(b"\x02" * size)
    before = snapshot(tmp_path)
    with pytest.raises(SegmentAlignmentError, match=offset_to_name(100)):
        MappedFileQueue(tmp_path, size).load()
    with pytest.raises(SegmentAlignmentError, match=offset_to_name(100)):
        MappedFileQueue(tmp_path, size).load(read_only=True)
    assert snapshot(tmp_path) == before


def test_a_misaligned_segment_after_the_first_is_refused(tmp_path):
    from mqstore.errors import SegmentAlignmentError
    (tmp_path / offset_to_name(0)).write_bytes(bytes(SIZE))
    (tmp_path / offset_to_name(SIZE + 10)).write_bytes(bytes(SIZE))
    with pytest.raises((SegmentAlignmentError, SegmentGapError), match=offset_to_name(SIZE + 10)):
        MappedFileQueue(tmp_path, SIZE).load()


def test_a_queue_starting_at_a_later_boundary_loads(tmp_path):
    "A consume queue whose old files were deleted starts at a multiple of the file size: fine."
    cq_size = 20 * 8
    for k in (3, 4, 5):
        (tmp_path / offset_to_name(k * cq_size)).write_bytes(bytes([k]) * cq_size)
    q = MappedFileQueue(tmp_path, cq_size).load()
    assert q.min_offset == 3 * cq_size
    assert q.find_by_offset(4 * cq_size + 7).name == offset_to_name(4 * cq_size)
    q.close()


def folder_state(folder):
    "Names, sizes, mtimes and content hashes of everything under `folder`."
    import hashlib
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns,
                                         hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_read_only_load_changes_nothing_and_maps_read_only(tmp_path):
    "Issue 25 item 3, at the queue's level: a zero-byte last file stays, the maps refuse writes."
    q = MappedFileQueue(tmp_path, SIZE)
    write_stream(q, [bytes([i + 1]) * 300 for i in range(7)])
    q.flush(); q.close()
    (tmp_path / offset_to_name(len(q.files) * SIZE)).write_bytes(b"")   # a crash right after creating it
    before = folder_state(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                                    # no "removed" warning
        ro = MappedFileQueue(tmp_path, SIZE).load(read_only=True)
    assert [mf.writable for mf in ro.files] == [False] * len(q.files)
    mf = ro.find_by_offset(0)
    assert mf.read(0, 3) == b"\x01" * 3
    with pytest.raises(TypeError):
        mf._mm[0:1] = b"x"
    ro.flush(); ro.close()
    assert folder_state(tmp_path) == before


def test_a_read_only_queue_refuses_to_create_truncate_or_delete(tmp_path):
    from mqstore.errors import StoreStateError
    q = MappedFileQueue(tmp_path, SIZE)
    write_stream(q, [b"\x05" * 600 for _ in range(4)])
    q.flush(); q.close()
    before = folder_state(tmp_path)
    ro = MappedFileQueue(tmp_path, SIZE).load(read_only=True)
    for attempt in (lambda: ro.last_file(create=True), lambda: ro.truncate_dirty_files(100),
                    lambda: ro.delete_expired_by_time(0, now_ms=1e18), ro.destroy):
        with pytest.raises(StoreStateError, match="read-only"):
            attempt()
    ro.close()
    assert folder_state(tmp_path) == before


def test_warm_pages_on_a_file_found_on_disk_writes_nothing(tmp_path):
    from mqstore.mapped_file import MappedFile
    from mqstore.mapped_file_queue import warm_pages
    mf = MappedFile.create(tmp_path, 0, 4 * SIZE)
    mf.append(b"\x09" * (4 * SIZE)); mf.flush(); mf.close()
    os.utime(tmp_path / offset_to_name(0), ns=(10**18, 10**18))     # any write fault moves it to now
    before = folder_state(tmp_path)
    again = MappedFile(tmp_path / offset_to_name(0), 4 * SIZE)
    warm_pages(again)
    again.close()
    assert folder_state(tmp_path) == before


def test_allocate_service_counts_hits_misses_and_waits(tmp_path):
    "The first get is a miss; later ones are hits; a hit whose file is still being prepared counts as a wait."
    import threading
    from mqstore.mapped_file_queue import AllocateService
    alloc = AllocateService(warm=False)
    gate = threading.Event()
    prepare = alloc._prepare
    def slow_in_the_thread(folder, offset, size, warm=True):   # the thread calls with warm=True
        if warm:
            gate.wait(5)
        return prepare(folder, offset, size, warm)
    alloc._prepare = slow_in_the_thread
    try:
        first = alloc.get(tmp_path, 0, 4096)          # a miss: created on the spot, and 4096 requested
        threading.Timer(0.2, gate.set).start()
        second = alloc.get(tmp_path, 4096, 4096)      # asked for by the first get: a hit, and the thread
        assert (alloc.misses, alloc.hits) == (1, 1)   # had just started, so it waited
        assert alloc.waits == 1 and second.file_from_offset == 4096
        assert alloc.wait_idle()
        third = alloc.get(tmp_path, 8192, 4096)       # prepared while we looked: a hit without a wait
        assert (alloc.hits, alloc.waits) == (2, 1)
        for f in (first, second, third):
            f.close()
    finally:
        gate.set()
        alloc.shutdown()
