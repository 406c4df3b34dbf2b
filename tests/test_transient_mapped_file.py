"TransientMappedFile (chapter 1): appends wait in a write buffer until commit, as with RocketMQ's transient store pool."
import pytest
from hypothesis import given, settings, strategies as st

from mqstore.errors import OffsetOutOfRangeError, SegmentFullError, StoreClosedError
from mqstore.mapped_file import MappedFile, TransientMappedFile, offset_to_name


def test_append_is_invisible_until_commit(tmp_path):
    tm = TransientMappedFile.create(tmp_path, 0, 4 * 4096)
    assert tm.append(b"hello") == 0
    assert (tm.wrote_position, tm.committed_position, tm.read_position) == (5, 0, 0)
    with pytest.raises(OffsetOutOfRangeError):
        tm.read(0, 5)
    assert bytes(tm._mm[:5]) == bytes(5)
    assert tm.commit(least_pages=1) == 0            # no page boundary crossed
    assert tm.commit() == 5 and tm.read(0, 5) == b"hello"
    assert tm.flush() == 5
    tm.close()


def test_commit_counts_pages_like_flush(tmp_path):
    tm = TransientMappedFile.create(tmp_path, 0, 4 * 4096)
    tm.append(b"a" * 9000)
    assert tm.commit(least_pages=3) == 0 and tm.commit(least_pages=2) == 9000
    tm.append(b"b" * 100)
    assert tm.commit(least_pages=1) == 9000
    assert tm.seal(b"END") == 9100                 # a seal commits what is buffered
    assert tm.is_full() and tm.read(9000, 103) == b"b" * 100 + b"END"
    tm.close()


def test_a_crash_loses_only_what_was_not_committed(tmp_path):
    tm = TransientMappedFile.create(tmp_path, 0, 4096)
    tm.append(b"kept"); tm.commit(); tm.append(b"lost")
    tm.close()
    with pytest.raises(StoreClosedError):
        tm.append(b"x")
    again = MappedFile(tmp_path / offset_to_name(0), 4096)
    assert bytes(again._mm[:8]) == b"kept" + bytes(4)
    again.close()


def test_refused_append_and_write_at(tmp_path):
    tm = TransientMappedFile.create(tmp_path, 0, 4096)
    tm.append(b"x" * 4000)
    with pytest.raises(SegmentFullError):
        tm.append(b"y" * 97)
    assert tm.wrote_position == 4000
    tm.write_at(10, b"ZZ")                          # reaches the buffer too: a commit keeps it
    tm.commit()
    assert tm.read(8, 6) == b"xxZZxx"
    tm.close()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=900), st.integers(0, 2)), max_size=25))
def test_same_bytes_as_a_plain_file(tmp_path_factory, steps):
    "Whatever the commits, after a final commit a buffered file holds what a plain one holds."
    folder = tmp_path_factory.mktemp("tm")
    plain = MappedFile.create(folder / "p", 0, 8192)
    tm = TransientMappedFile.create(folder / "t", 0, 8192)
    for data, least in steps:
        if len(data) > plain.free_space():
            continue
        assert plain.append(data) == tm.append(data)
        assert plain.wrote_position >= tm.commit(least) >= 0
        assert tm.read_position == tm.committed_position <= tm.wrote_position
    tm.commit()
    n = plain.wrote_position
    assert tm.read_position == n and tm.read(0, n) == plain.read(0, n)
    plain.close(); tm.close()
