"""The files of an opened index, hashed and watched: which files the manifest lists for what is open, their
sha256 checked against it (`verify`), and the cheap watch for files written since (`changed`) that the server
runs every few seconds (service.state)."""

from __future__ import annotations

import stat
from pathlib import Path

from common.errors import AppError, IndexDamaged
from common.files import sha256_file
from indexer.integrity import damaged
from indexer.manifest import MANIFEST_NAME, FileInfo, Manifest, ShardInfo
from indexer.shard import DENSE_FILES, delta_bm25_name
from indexer.write_events import write_events

Listed = list[tuple[Path, FileInfo]]


Fingerprint = tuple[int, int, int, int]


def fingerprint(path: Path) -> Fingerprint | None:
    """(inode, size, mtime, ctime in ns) of a file, None when it is not there: writing the file, through any of its
    names or a shared memory map, or replacing it changes one of them; the ctime whatever the writer does after (a
    restored mtime sets it again; only the clock set back could restore it). A name linked to it or removed
    changes the ctime too: the file is hashed again then, rather than trusted."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) if stat.S_ISREG(st.st_mode) else None


class IndexFiles:
    """The files of the shards `numbers` of the index at `root` (with BM25's when `with_bm25`; `dense` false: not
    their DENSE_FILES) and the tombstones.
    `reuse` (the same directory's earlier generation) shares what it has hashed and seen, so a new generation
    hashes only its new files."""

    def __init__(
        self,
        root: Path,
        manifest: Manifest,
        numbers: list[int],
        with_bm25: bool,
        reuse: "IndexFiles | None" = None,
        dense: bool = True,
    ) -> None:
        self.root, self.manifest, self.numbers, self.with_bm25 = root, manifest, numbers, with_bm25
        self.dense = dense  # False: the shards' text side only (indexer.shard.DENSE_FILES left out)
        # files whose bytes were hashed and found right: path -> sha256, shared with the generations to come
        self.verified: dict[Path, str] = reuse.verified if reuse is not None else {}
        # each file's (inode, size, mtime, ctime) when hashed or first seen: one written since differs (`changed`)
        self.fingerprints: dict[Path, Fingerprint] = reuse.fingerprints if reuse is not None else {}

    def all(self) -> Listed:
        """Every file the manifest lists (of the opened shards, and BM25's when it is open), with its record
        (size, sha256)."""
        files = [f for n in self.numbers for f in self.of_shard(self.manifest.shards[n])]
        if self.with_bm25:
            files += [(self.root / delta_bm25_name(info.name), info.bm25) for info in self.manifest.shards if info.bm25]
            if self.manifest.bm25 is not None:
                files.append((self.root / self.manifest.bm25_name, self.manifest.bm25))
        if self.manifest.tombstones is not None:
            files.append((self.root / self.manifest.tombstones.name, self.manifest.tombstones))
        return files

    def of_shard(self, info: ShardInfo) -> Listed:
        """The files of one shard (not its DENSE_FILES when `dense` is false), with their records."""
        return [(self.root / info.name / f, rec) for f, rec in info.files.items() if self.dense or f not in DENSE_FILES]

    def verify(self, files: Listed | None = None) -> None:
        """Check every file (or `files`) against the manifest's sha256 (slow: reads everything). Without it,
        opening checks every file's structure only (indexer.integrity), which cannot see bytes changed inside
        a payload."""
        for path, rec in self.all() if files is None else files:
            seen = fingerprint(path)  # before reading: a write during the hash shows at the next `changed`
            if seen is None:
                raise damaged(path, "is missing")
            if sha256_file(path) != rec.sha256:
                self.verified.pop(path, None)
                raise damaged(path, "does not match the manifest's sha256 (corrupted)")
            self.verified[path], self.fingerprints[path] = rec.sha256, seen

    def changed(self) -> Listed:
        """The files written or replaced since they were hashed (or first seen here: a file not hashed yet gets its
        baseline now), by their inode, size, modification and change times (`fingerprint`): a few microseconds per
        file, so a served index can be watched every few seconds (service.index_watch), the files held in memory
        too. A file that is gone is not listed: the writers never rewrite a file under its name, but remove a
        superseded generation's (indexer.gc) while a server may still serve it from memory. A change that keeps all
        four (the clock set back on purpose, or bytes rotting under the page cache) is found only by hashing
        (`verify`)."""
        out = []
        for path, rec in self.all():
            now, then = fingerprint(path), self.fingerprints.get(path)
            if now is None:
                continue
            if then is None:
                self.fingerprints[path] = now
            elif now != then:
                write_events().forget(path)  # its checked blocks are not trusted any more (indexer.checksums)
                out.append((path, rec))
        return out

    def check_manifest(self) -> None:
        """Read the manifest again (a few KB; the watch's every round, whatever its mtime says): IndexDamaged when
        it no longer matches its own checksum (a later generation written by an update is not damage)."""
        try:
            Manifest.load(self.root)
        except IndexDamaged:
            raise
        except AppError as exc:
            path = self.root / MANIFEST_NAME
            raise IndexDamaged(f"index manifest {path} can no longer be read: {exc.message}", str(path)) from None

    def unverified(self, files: Listed | None = None) -> Listed:
        """The files (default: all) not yet hashed and found right, in this generation or an earlier one."""
        return [(p, rec) for p, rec in (self.all() if files is None else files) if self.verified.get(p) != rec.sha256]
