"""indexer.write_events: a write through any name of a watched file is reported, and a file stops being watched
with the last check of it (the watches do not pile up over reloads)."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

from indexer.write_events import WriteEvents


class Check:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.forgot = 0

    def forget(self) -> None:
        self.forgot += 1


def watches(events: WriteEvents) -> int:
    """The inotify watches of the instance (/proc/self/fdinfo lists one `inotify wd:` line a watch)."""
    fd = events._inotify.fileno()  # type: ignore[union-attr]
    return Path(f"/proc/self/fdinfo/{fd}").read_text().count("inotify wd:")


@pytest.fixture()
def events() -> WriteEvents:
    events = WriteEvents()
    if not events.available:
        pytest.skip("no inotify here")
    return events


def test_a_write_through_another_link_is_reported(events, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    served = tmp_path / "a" / "f"
    served.write_bytes(b"x" * 100)
    os.link(served, tmp_path / "b" / "f")
    check = Check(served)
    assert events.watch(check)
    events.poll()
    assert check.forgot == 0
    with open(tmp_path / "b" / "f", "r+b") as f:  # through the other directory's name
        f.write(b"y")
    events.poll()
    assert check.forgot >= 1  # one forget per event (a write: MODIFY, then CLOSE_WRITE)


def test_the_watch_ends_with_the_last_check_of_its_file(events, tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x")
    first, second = Check(path), Check(path)
    assert events.watch(first) and events.watch(second)
    assert watches(events) == 1  # one inode, one watch
    del first
    gc.collect()
    assert watches(events) == 1  # the second check still trusts the file
    path.write_bytes(b"y")
    events.poll()
    assert second.forgot >= 1
    del second
    gc.collect()
    assert watches(events) == 0
    again = Check(path)  # watched anew when a check of it comes back
    assert events.watch(again) and watches(events) == 1
    path.write_bytes(b"z")
    events.poll()
    assert again.forgot >= 1
