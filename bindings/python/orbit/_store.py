"""orbit.Store: a store directory opened for offline inspection, as an object (a context manager and an
iterable of its entries) over the functions store_list / store_summary / store_verify / store_gc.

    with orbit.Store("store") as store:          # OrbitError here when the directory is not a store
        print(store.summary().entries, "entries of model", store.model_fingerprint)
        for entry in store:                      # StoreEntryInfo, one per committed entry
            print(entry.key[:12], entry.kind, entry.blob_bytes)
        assert store.verify().clean
        store.gc(dry_run=True)

Reading is safe while an Engine has the directory open; gc() must run when no engine has it open.
"""
from __future__ import annotations

import os
from typing import Iterator, Union

from ._orbit import GcReport, OrbitError, StoreEntryInfo, StoreSummary, VerifyReport
from ._orbit import store_gc, store_list, store_summary, store_verify


class Store:
    """A store directory opened for offline inspection (orbit/store.h; `orbit store ls|stat|verify|gc`).

    Store(dir) checks that DIR is a store (OrbitError otherwise). Iterating yields its committed entries
    (StoreEntryInfo); len() is their number. A closed Store raises OrbitError on use. Use it as a context
    manager, or call close()."""

    def __init__(self, dir: Union[str, os.PathLike]) -> None:
        """Opens DIR; raises OrbitError naming it when it is not a store directory, TypeError for anything
        but a str or os.PathLike of one, ValueError for ''."""
        if not isinstance(dir, (str, os.PathLike)) or not isinstance(os.fspath(dir), str):
            raise TypeError(f"Store: dir must be a str or os.PathLike, got {type(dir).__name__}")
        if os.fspath(dir) == "":
            raise ValueError("Store: dir is empty: give the store directory")
        self._dir = os.fspath(dir)
        self._closed = False
        self._fingerprint = store_summary(self._dir).model_fingerprint

    def __getattr__(self, name: str):
        # Reached only where normal lookup failed: the fields __init__ sets, on an instance Store.__new__ made.
        if name in ("_dir", "_closed", "_fingerprint"):
            raise TypeError("this orbit.Store was made by Store.__new__ without __init__ and holds nothing; "
                            "create one with orbit.Store(dir)")
        raise AttributeError(f"'Store' object has no attribute {name!r}")

    @property
    def dir(self) -> str:
        """The store directory."""
        return self._dir

    @property
    def model_fingerprint(self) -> str:
        """The fingerprint of the model whose chunks the store holds."""
        return self._fingerprint

    @property
    def closed(self) -> bool:
        """True after close()."""
        return self._closed

    def _check(self) -> None:
        if self._closed:
            raise OrbitError(f"Store({self._dir!r}) is closed")

    def summary(self) -> StoreSummary:
        """Entries, bytes by kind, pinned, corrupt, unreferenced blobs and temp files (read now)."""
        self._check()
        return store_summary(self._dir)

    def entries(self) -> list[StoreEntryInfo]:
        """The committed entries (read now)."""
        self._check()
        return store_list(self._dir)

    def verify(self) -> VerifyReport:
        """Checks every blob's size and checksum, and the index with SQLite's integrity_check (index_damage:
        why it is inconsistent, or ''); problems are reported, never deleted."""
        self._check()
        return store_verify(self._dir)

    def gc(self, *, dry_run: bool = False) -> GcReport:
        """Removes unreferenced blobs and temp files of writes that never completed (dry_run: only reports).
        No engine may have the store open. Raises OrbitError naming `orbit store repair` when SQLite finds the
        index inconsistent; while rows are damaged, keeps the blobs repair could restore (kept_paths)."""
        self._check()
        return store_gc(self._dir, dry_run=dry_run)

    def close(self) -> None:
        """Closes this handle (the directory is untouched); further use raises OrbitError."""
        self._closed = True

    def __iter__(self) -> Iterator[StoreEntryInfo]:
        """Iterates over the committed entries (read when iteration starts)."""
        return iter(self.entries())

    def __len__(self) -> int:
        """The number of committed entries."""
        return self.summary().entries

    def __enter__(self) -> "Store":
        """Returns the store itself."""
        self._check()
        return self

    def __exit__(self, *exc) -> None:
        """Closes the store."""
        self.close()

    def __repr__(self) -> str:
        return f"Store({self._dir!r}{', closed' if self._closed else ''})"
