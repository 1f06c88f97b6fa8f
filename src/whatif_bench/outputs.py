"""Safe outputs: file names taken from data, and output files that are locked, written to a
temporary name and renamed only when complete.

Every command that writes a file goes through these helpers, so the promises of
``docs/RELIABILITY.md`` hold in one place:

- a name taken from data (a target, a forecaster's name) never chooses a path outside the
  output folder (``safe_name`` refuses it);
- an output never replaces one of the run's inputs (``check_output_path``);
- two runs never write the same output at once (``output_lock``: an advisory ``fcntl`` lock on a
  ``.<name>.lock`` file beside it, released by the kernel when the process dies);
- the final name only ever holds a complete file (``atomic_output``: a temporary name in the same
  folder, ``os.replace`` on success, removed on any failure, Ctrl-C included); a folder output
  (``write_folder``) is complete only once its ``manifest.json``, written last, is in it;
- a full disk or a read-only folder is one clear ``OutputError``, not a traceback.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from whatif_bench.errors import WhatIfError

# Letters, digits and . _ + - = @, not starting with a dot: no separators, no "..", no hidden
# files, nothing a shell or a file system treats specially.
_SAFE_NAME = re.compile(r"[A-Za-z0-9_+\-=@][A-Za-z0-9_.+\-=@]*")
MAX_NAME_LENGTH = 200


class OutputError(WhatIfError):
    """An output path cannot be written (bad name, clash with an input, locked, disk full)."""


class OutputLockedError(OutputError):
    """Another process holds the lock of an output (see ``output_lock``)."""


def is_safe_name(name: object) -> bool:
    """Whether ``name`` can be used as one file name inside a folder (see ``safe_name``)."""
    return (
        isinstance(name, str)
        and len(name) <= MAX_NAME_LENGTH
        and _SAFE_NAME.fullmatch(name) is not None
    )


def safe_name(name: object, what: str) -> str:
    """``name`` itself if it is safe as a single file name, else an ``OutputError``.

    Safe: 1-200 characters among letters, digits and ``. _ + - = @``, not starting with a dot
    (so no ``/``, ``\\``, ``..``, absolute paths, NUL or hidden files). ``what`` names the
    source in the message, e.g. ``"forecaster name"``.
    """
    if not is_safe_name(name):
        raise OutputError(
            f"{what} {name!r} cannot be used as a file name: use 1-{MAX_NAME_LENGTH} letters, "
            "digits or . _ + - = @, not starting with a dot"
        )
    return str(name)


def check_output_path(
    path: str | os.PathLike, inputs: Iterable[str | os.PathLike] = (), folder: bool = False
) -> Path:
    """Refuse an output path that is unusable or is one of ``inputs``; returns it as a Path.

    A file output must not be an existing folder, nor lie under a file; a folder output
    (``folder=True``) must not be an existing file. Neither may be one of the inputs.
    """
    if os.fspath(path) == "":  # checked before Path(), which turns "" into "."
        raise OutputError("the output path is empty")
    path = Path(path)
    if folder:
        if path.exists() and not path.is_dir():
            raise OutputError(f"{path}: exists and is not a folder")
    elif path.is_dir():
        raise OutputError(f"{path}: is a folder; give a file name")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputError(f"{path}: {parent} is a file, not a folder")
            break
    for source in inputs:
        source = Path(source)
        same = source.exists() and path.exists() and os.path.samefile(source, path)
        if same or source.resolve() == path.resolve():
            raise OutputError(f"{path}: the output would replace the input {source}")
    return path


def _describe(exc: OSError, path: Path) -> str:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"{path}: no space left on the device"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{path}: no permission to write here"
    if exc.errno == errno.EFBIG:
        return f"{path}: file too large for this file system or limit"
    return f"{path}: cannot write ({exc.strerror or exc})"


def make_folder(path: str | os.PathLike) -> Path:
    """Create ``path`` (and its parents) as a folder, with a clear error if that fails."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputError(f"{path}: exists and is not a folder") from None
    except OSError as exc:
        raise OutputError(_describe(exc, path)) from None
    return path


def lock_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.lock")


@contextlib.contextmanager
def output_lock(path: str | os.PathLike) -> Iterator[None]:
    """Hold an exclusive lock for writing ``path``; another holder makes this fail at once.

    The lock file ``.<name>.lock`` stays behind (removing it would race with a waiting run);
    the kernel drops the lock itself when the process ends, however it ends.
    """
    path = Path(path)
    make_folder(path.parent)
    try:
        handle = open(lock_path(path), "a")  # noqa: SIM115 (held for the whole block)
    except OSError as exc:
        raise OutputError(_describe(exc, path)) from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputLockedError(
                f"{path}: another whatif run is writing this output; wait for it or choose "
                "another path"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def temporary_path(path: Path) -> Path:
    """The temporary name ``path`` is written under: hidden, in the same folder, per process."""
    return path.with_name(f".{path.name}.partial-{os.getpid()}")


@contextlib.contextmanager
def atomic_output(
    path: str | os.PathLike, inputs: Iterable[str | os.PathLike] = (), lock: bool = True
) -> Iterator[Path]:
    """Lock ``path``, yield a temporary path to write, rename it to ``path`` on success.

    ``lock=False`` skips the lock (and its ``.<name>.lock`` file) for small outputs whose
    folder the caller already locks, or where two writers racing is harmless: the per-process
    temporary name and the rename still keep the final name complete.

    On any exception (Ctrl-C included) the temporary file is removed and ``path`` is left as it
    was, so the final name only ever holds a complete file. ``OSError`` from the body or the
    rename (disk full, read-only folder) becomes one ``OutputError`` naming the path.
    """
    path = check_output_path(path, inputs)
    with output_lock(path) if lock else contextlib.nullcontext():
        tmp = temporary_path(path)
        try:
            yield tmp
            os.replace(tmp, path)
        except OSError as exc:
            raise OutputError(_describe(exc, path)) from None
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()


def write_text_atomic(path: str | os.PathLike, text: str, lock: bool = True) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through ``atomic_output``; returns the path."""
    with atomic_output(path, lock=lock) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


# ---- folder outputs (whatif export, whatif stream) -------------------------------------------
MANIFEST = "manifest.json"


def check_folder_output(out: Path, overwrite: bool, what: str = "whatif output folder") -> None:
    """Refuse ``out`` as a folder output: a symbolic link, a file, an existing folder unless
    ``overwrite``, or a non-empty folder without ``manifest.json`` (not ``what``, e.g.
    ``"whatif export"``, so not ours to replace)."""
    if out.is_symlink():
        raise OutputError(f"{out}: is a symbolic link; give the folder itself")
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out}: exists and is not a folder")
    if not out.exists():
        return
    if not overwrite:
        raise OutputError(f"{out}: already exists; pass --overwrite to replace it")
    if not (out / MANIFEST).is_file() and any(out.iterdir()):
        raise OutputError(
            f"{out}: not a {what} (no {MANIFEST}) and not empty; refusing to replace it"
        )


def file_hashes(folder: Path) -> dict[str, dict[str, Any]]:
    """Size in bytes and SHA-256 of every file under ``folder``, by relative POSIX path."""
    out = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        out[path.relative_to(folder).as_posix()] = {
            "bytes": path.stat().st_size,
            "sha256": digest.hexdigest(),
        }
    return out


def remove_path(path: Path) -> None:
    """Remove a file or a folder tree, quietly (for temporaries)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def stale_temporaries(out: Path) -> list[Path]:
    """Temporary folders left by killed runs writing ``out`` (safe to remove under its lock)."""
    prefixes = (f".{out.name}.partial-", f".{out.name}.old-")
    return [p for p in out.parent.iterdir() if p.name.startswith(prefixes)]


@contextlib.contextmanager
def atomic_folder(out: Path, check: Callable[[], object]) -> Iterator[Path]:
    """Yield an empty temporary folder that becomes ``out`` when the block ends without error.

    Under ``output_lock(out)``: ``check()`` runs (it raises if ``out`` may not be written),
    temporaries of killed runs are removed, the block fills the temporary folder, and it is
    renamed to ``out``. An existing ``out`` is moved aside first and removed once the new one
    is in place, or put back if it cannot be. On any failure (Ctrl-C included) the temporary
    folder is removed and ``out`` is left as it was; ``OSError`` (disk full, read-only folder)
    becomes one ``OutputError``.
    """
    with output_lock(out):
        check()
        for stale in stale_temporaries(out):
            remove_path(stale)
        tmp = temporary_path(out)
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        try:
            tmp.mkdir()
            yield tmp
            if out.exists():
                os.replace(out, old)
            os.replace(tmp, out)
        except OSError as exc:
            raise OutputError(_describe(exc, out)) from None
        finally:
            if tmp.exists():
                remove_path(tmp)
            if old.exists() and out.exists():
                remove_path(old)
            elif old.exists():  # the new folder could not be renamed in: put the old one back
                with contextlib.suppress(OSError):
                    os.replace(old, out)


def write_folder(
    out: Path,
    overwrite: bool,
    fill: Callable[[Path], dict[str, Any]],
    what: str = "whatif output folder",
) -> Path:
    """Write the folder ``out`` atomically (``atomic_folder``): ``fill(tmp)`` writes its files
    into the empty temporary folder ``tmp`` and returns the manifest; returns ``out``.

    ``out`` is checked again under the lock (``check_folder_output``); ``manifest.json`` (the
    returned dict plus ``files``, the size and SHA-256 of every file) is written and synced
    last, just before the rename.
    """
    with atomic_folder(out, lambda: check_folder_output(out, overwrite, what)) as tmp:
        manifest = dict(fill(tmp))
        manifest["files"] = file_hashes(tmp)
        text = json.dumps(manifest, indent=2, sort_keys=True, allow_nan=False) + "\n"
        partial = tmp / f".{MANIFEST}.tmp"
        with open(partial, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, tmp / MANIFEST)
    return out
