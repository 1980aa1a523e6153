"""The writer lock (indexer.lock): a second writer is refused naming the first, in another thread or process;
a writer killed while holding it leaves no stale lock."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from common.errors import AppError
from indexer.lock import LOCK_NAME, writer_lock

HOLD = (
    "import sys, time; from indexer.lock import writer_lock\nwith writer_lock(sys.argv[1], 'indexer add'):\n"
    "    print('held', flush=True); time.sleep(60)"
)


def test_a_second_writer_is_refused_and_the_first_named(tmp_path):
    with writer_lock(tmp_path, "indexer delete"):
        with pytest.raises(AppError, match="another writer \\(indexer delete, pid \\d+, since ") as err:
            with writer_lock(tmp_path, "indexer compact"):
                pass
        assert err.value.kind == "conflict" and err.value.status == 409
    with writer_lock(tmp_path, "indexer compact"):  # free again
        assert "indexer compact" in (tmp_path / LOCK_NAME).read_text()


def test_a_killed_writer_leaves_no_stale_lock(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(AppError, match="indexer add"):
            with writer_lock(tmp_path, "indexer delete"):
                pass
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.time() + 10
    while True:  # the kernel drops the dead process's lock
        try:
            with writer_lock(tmp_path, "indexer delete"):
                break
        except AppError:
            assert time.time() < deadline
            time.sleep(0.05)
