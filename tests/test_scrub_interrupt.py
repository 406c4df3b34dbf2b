"""A streaming check stopped early (an error in a check, a progress callback that raises, Ctrl-C)
raises that error, not `BufferError: cannot close exported pointers exist` from closing a store
whose window walk still held a view of a segment (chapter 13, `scrub_open_store`)."""
import itertools, random

import pytest

from mqstore.config import StoreConfig
from mqstore.message import Message
from mqstore.scrub import scrub_store
from mqstore.store import MessageStore

CFG = StoreConfig.small(commit_log_file_size=16 * 1024)


class Stop(Exception):
    pass


def _write(root, n=200):
    rng, tick = random.Random(3), itertools.count()
    with MessageStore.open(root, CFG, clock=lambda: 1_700_000_000_000 + 10 * next(tick)) as s:
        for i in range(n):
            s.put(Message(f"T{i % 3}", rng.randbytes(rng.randrange(300)), queue_id=i % 2,
                          properties={"KEYS": f"k{i}"}))
        s.wait_dispatched()


@pytest.mark.parametrize("error", [Stop, KeyboardInterrupt])
@pytest.mark.parametrize("window", [1024, 4096])
def test_an_interrupted_scrub_raises_its_own_error_and_releases_the_store(tmp_path, error, window):
    _write(tmp_path / "s")
    calls = []

    def progress(offset):
        calls.append(offset)
        if len(calls) == 2:                 # mid-walk: a window yielded, the next one scanned ahead
            raise error("stop here")

    with pytest.raises(error, match="stop here") as info:
        scrub_store(tmp_path / "s", CFG, progress=progress, window=window)
    assert info.value.__context__ is None   # nothing failed while the store closed
    report = scrub_store(tmp_path / "s", CFG, window=window)      # the store opens and checks again
    assert not report.problems and report.records == 200


def test_verify_command_interrupted_says_so(tmp_path, monkeypatch, capsys):
    "Ctrl-C during `mqstore verify` (open_recorded + scrub_open_store in a `with`): exit 130, no traceback."
    from mqstore import cli, scrub
    _write(tmp_path / "s")
    original, seen = scrub.Scrubber.window, []

    def interrupted(self, w):
        seen.append(w)
        if len(seen) == 2:
            raise KeyboardInterrupt
        return original(self, w)

    monkeypatch.setattr(scrub.Scrubber, "window", interrupted)
    assert cli.main(["verify", str(tmp_path / "s")]) == 130
    assert "mqstore: interrupted" in capsys.readouterr().err
    assert len(seen) == 2
