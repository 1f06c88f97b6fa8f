"""Safe outputs: file names taken from data, and output files that are locked, written to a
temporary name and renamed only when complete.

Every command that writes a file or folder goes through these helpers, so the promises of
``docs/RELIABILITY.md`` hold in one place:

- a name taken from data (a target, a forecaster's name) never chooses a path outside the
  output folder (``safe_name`` refuses it);
- an output never replaces one of the run's inputs, compared by real path
  (``check_output_path``), and a folder is never replaced while it is or holds an input
  (``check_not_inside``);
- only regular files and folders are used: a FIFO, a device, a socket or a symbolic link loop,
  as an output, an output's folder or an input, is one ``OutputError`` (``check_regular``;
  an input file names the cause, ``input_problem``); an output, file or folder, that is itself
  a symbolic link (dangling or not) is refused, never replaced by what it points to or by a
  regular file (``check_output_path``, ``check_folder_output``);
- an empty path is refused, never taken for the current folder (``refuse_empty``);
- a folder is replaced only if this toolkit wrote it as an output of the same kind: its
  identity record ``.whatif-output.json`` (``{"tool": "whatif-bench", "kind": ..., "version":
  1}``) says so (``check_folder_output``); a folder without one, whoever wrote it, is refused;
- likewise an existing file named as an output (``--out``) is replaced only if its own content,
  never its name, says this toolkit wrote it as an output of the same kind (``file_kind``,
  ``check_file_kind``, ``atomic_output(kind=...)``): an HDF5 corpus or baselines store by its
  root attributes ``format`` (``"whatif-<kind>"``) and ``format_version``, a PNG figure by its
  ``whatif-bench`` text chunk (``png_metadata``), the relationship reference by the header
  ``whatif relationships doc`` opens it with; any other file is refused with one line. Files
  the toolkit writes inside a folder it owns (an evaluation's chunks and reports) are not
  checked;
- two runs never write the same output at once (``output_lock``: an advisory ``fcntl`` lock on a
  ``.<name>.lock`` file beside it, released by the kernel when the process dies);
- the final name only ever holds a complete file (``atomic_output``: a temporary name in the same
  folder, ``os.replace`` on success, removed on any failure, Ctrl-C included); a folder output
  (``write_folder``) is complete only once its ``manifest.json``, written last, is in it;
- the only temporaries ever removed as stale are this toolkit's: ``.<name>.whatif.partial-PID``
  or ``.<name>.whatif.old-PID`` whose process is gone (``remove_stale_temporaries``, run by
  every locked ``atomic_output`` and ``atomic_folder``);
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
import stat
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


# ---- what a path is ----------------------------------------------------------------------
_SPECIAL = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def path_problem(path: str | os.PathLike) -> str | None:
    """What makes ``path`` unusable as a file or folder of a run, or ``None``.

    ``"a symbolic link loop"`` when resolving it (any component) loops; ``"a FIFO (named
    pipe)"``, ``"a character device"``, ``"a block device"`` or ``"a socket"`` when it is one
    (after following symbolic links). A missing path is no problem here.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link loop"
        return None
    for test, what in _SPECIAL:
        if test(mode):
            return what
    return None


def check_regular(path: str | os.PathLike, role: str = "path") -> Path:
    """``path`` as a Path, or an ``OutputError`` if it is a symbolic link loop or a special
    file (FIFO, device, socket); ``role`` (e.g. ``"input"``) names it in the message."""
    problem = path_problem(path)
    if problem is not None:
        kind = "a regular file or folder" if problem == "a symbolic link loop" else "a regular file"
        raise OutputError(f"{os.fspath(path)}: the {role} is {problem}, not {kind}")
    return Path(path)


def input_problem(path: str | os.PathLike, role: str) -> str | None:
    """Why ``path`` cannot be read as the input file ``role`` (e.g. ``"corpus"``), or ``None``:
    ``"PATH: the corpus is a FIFO (named pipe), not a regular file"`` (a symbolic link loop, a
    device or a socket likewise, ``path_problem``), found without opening it (a FIFO would
    block). A regular file, a folder or a missing path is no problem here: the reader says so
    in its own words."""
    problem = path_problem(path)
    if problem is None:
        return None
    return f"{os.fspath(path)}: the {role} is {problem}, not a regular file"


def refuse_empty(
    path: str | os.PathLike, what: str, error: type[WhatIfError] = OutputError
) -> str | os.PathLike:
    """``path`` itself unless it is empty: ``Path("")`` is the current folder, so an empty
    option would quietly read or write there (or fall back to its default); then
    ``error("WHAT: the path is empty")``, ``what`` naming the option (e.g. ``"--cache"``)."""
    if os.fspath(path) == "":
        raise error(f"{what}: the path is empty")
    return path


def real_path(path: str | os.PathLike) -> str:
    """``os.path.realpath`` of ``path`` (symbolic links followed, never raising on a loop)."""
    return os.path.realpath(os.path.abspath(os.fspath(path)))


def _inside(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def check_output_path(
    path: str | os.PathLike, inputs: Iterable[str | os.PathLike] = (), folder: bool = False
) -> Path:
    """Refuse an output path that is unusable or is one of ``inputs``; returns it as a Path.

    A file output must not be an existing folder, nor lie under a file, nor be a symbolic link
    (dangling or not: the rename would put a regular file in its place); a folder output
    (``folder=True``) must not be an existing file. Neither may be one of the inputs (compared
    by real path: another spelling or a symbolic link is the same path), nor a symbolic link
    loop, nor a special file (FIFO, device, socket): those are never replaced by a regular
    file. Each input that exists must be a regular file or folder too.
    """
    if os.fspath(path) == "":  # checked before Path(), which turns "" into "."
        raise OutputError("the output path is empty")
    path = check_regular(path, "output")
    for parent in path.parents:
        check_regular(parent, "output's folder")
    sources = [check_regular(source, "input") for source in inputs if os.fspath(source) != ""]
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
    real = real_path(path)
    for source in sources:
        same = source.exists() and path.exists() and os.path.samefile(source, path)
        if same or real_path(source) == real:
            raise OutputError(f"{path}: the output would replace the input {source}")
    if not folder and path.is_symlink():  # dangling or not: the rename would replace the link
        raise OutputError(
            f"{path}: is a symbolic link; refusing to replace it: give the file itself or "
            "another name"
        )
    return path


def check_not_inside(
    folder: str | os.PathLike, inputs: Iterable[str | os.PathLike], verb: str = "replace"
) -> None:
    """Refuse to ``verb`` the folder ``folder`` when an input of the run is it or lies inside
    it (by real path, so symbolic links and other spellings count)."""
    outer = real_path(folder)
    for source in inputs:
        if os.fspath(source) == "":
            continue
        if _inside(real_path(source), outer):
            raise OutputError(
                f"{folder}: holds the input {source}; refusing to {verb} it (choose another folder)"
            )


def _describe(exc: OSError, path: Path) -> str:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"{path}: no space left on the device"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{path}: no permission to write here"
    if exc.errno == errno.EFBIG:
        return f"{path}: file too large for this file system or limit"
    return f"{path}: cannot write ({exc.strerror or exc})"


def os_error(exc: OSError, path: str | os.PathLike) -> OutputError:
    """The ``OutputError`` for ``exc`` met writing ``path`` (full disk, no permission, ...)."""
    return OutputError(_describe(exc, Path(path)))


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
    path = check_regular(path, "output")  # never a lock file beside /dev/null, a FIFO, a loop
    check_regular(path.parent, "output's folder")
    make_folder(path.parent)
    check_regular(lock_path(path), "lock file")  # opening a FIFO there would block
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


# ---- temporaries ----------------------------------------------------------------------------
# A temporary of ``NAME`` is ``.NAME.whatif.partial-PID`` (a file or folder being written) or
# ``.NAME.whatif.old-PID`` (an earlier folder moved aside): the ``.whatif.`` tag and the owning
# process id form its marker. Only a name of exactly this form, whose process is gone, is ever
# removed as stale (``remove_stale_temporaries``); a folder must also hold the toolkit's
# identity record. Any other name beside an output (``.NAME.partial-notes.txt``,
# ``.NAME.old-backup/``) is the user's and never touched.
_TAG = ".whatif."


def temporary_path(path: Path, pid: int | None = None) -> Path:
    """The temporary name ``path`` is written under: hidden, in the same folder, per process
    (``pid``, default this one)."""
    return path.with_name(f".{path.name}{_TAG}partial-{os.getpid() if pid is None else pid}")


def aside_path(path: Path, pid: int | None = None) -> Path:
    """The name an existing folder ``path`` is moved to while its replacement is renamed in."""
    return path.with_name(f".{path.name}{_TAG}old-{os.getpid() if pid is None else pid}")


def _temporary_pid(out: Path, candidate: Path) -> tuple[str, int] | None:
    match = re.fullmatch(
        re.escape(f".{out.name}{_TAG}") + r"(partial|old)-([1-9][0-9]{0,9})", candidate.name
    )
    return (match.group(1), int(match.group(2))) if match else None


def process_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user counts as alive)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True
    return True


def stale_temporaries(out: Path) -> list[Path]:
    """This toolkit's temporaries beside ``out`` left by runs that are gone (see ``_TAG``):
    the exact name form, an owning process that no longer exists, and for a folder the
    toolkit's identity record in it (``.old-`` names only folders: only folders are moved
    aside); nothing else is ever listed."""
    found = []
    try:
        entries = list(out.parent.iterdir())
    except OSError:
        return []
    for candidate in entries:
        parsed = _temporary_pid(out, candidate)
        if parsed is None or process_alive(parsed[1]):
            continue
        if candidate.is_symlink():
            continue
        if parsed[0] == "old" and not candidate.is_dir():  # only folders are ever moved aside
            continue
        if candidate.is_dir():
            record = read_identity(candidate)
            # a folder being written holds the record with its writer's pid; one moved aside
            # holds the record of the output it was
            if record is None or (parsed[0] == "partial" and record.get("pid") != parsed[1]):
                continue
        else:
            try:
                regular = stat.S_ISREG(candidate.lstat().st_mode)
            except OSError:
                continue
            if not regular:
                continue
        found.append(candidate)
    return sorted(found)


def remove_stale_temporaries(out: Path, own: Path | None = None) -> None:
    """Remove ``stale_temporaries(out)`` (call holding ``out``'s lock), except ``own``.

    A folder moved aside (``.NAME.whatif.old-PID``) by a run killed before its new folder was
    renamed in is the user's previous output: it is put back when ``out`` is missing, removed
    only when ``out`` exists.
    """
    for stale in stale_temporaries(out):
        if own is not None and stale == own:
            continue
        kind, _ = _temporary_pid(out, stale) or ("", 0)
        if kind == "old" and not out.exists() and not out.is_symlink():
            with contextlib.suppress(OSError):
                os.replace(stale, out)
            continue
        remove_path(stale)


# ---- file outputs: which toolkit output a file is, read from its own content -----------------
# An existing file is replaced by a file output of ``kind`` only if ``file_kind`` reads that kind
# in the file itself (never from its name): an HDF5 file's root attributes ``format`` =
# ``"whatif-<kind>"`` and an integer ``format_version`` (the corpus writer's and the baselines
# store's own), a PNG's ``tEXt`` chunk ``whatif-bench`` = ``kind=<kind> version=<n>`` (written
# through ``png_metadata``), or the header a text output opens with (``_TEXT_HEADERS``).
CORPUS = "corpus"
BASELINES = "baselines"
REFERENCE = "relationships-doc"
FIGURE = "figure"
FILE_KINDS = {
    CORPUS: "a whatif corpus",
    BASELINES: "a whatif baselines store",
    REFERENCE: "a whatif relationship reference",
    FIGURE: "a whatif figure",
}
# the header ``whatif relationships doc`` has written since its first version (relationships/docs.py)
_TEXT_HEADERS = {
    REFERENCE: b"# Relationship reference\n\nGenerated by `whatif relationships doc` from the spec ",
}
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_TEXT_CHUNKS = 64  # the marker is among the first chunks, before the image data
_MARKER = re.compile(r"kind=([a-z][a-z0-9-]{0,63}) version=([1-9][0-9]{0,5})")


def png_metadata(kind: str = FIGURE) -> dict[str, str]:
    """The PNG text chunk (for matplotlib's ``savefig(metadata=...)``) that marks a PNG as this
    toolkit's output of ``kind`` (``file_kind`` reads it)."""
    return {TOOL: f"kind={kind} version={IDENTITY_VERSION}"}


def file_kind(path: str | os.PathLike) -> str | None:
    """The kind of toolkit output the regular file ``path`` holds (``"corpus"``,
    ``"baselines"``, ``"figure"``, ``"relationships-doc"``), read from its content; ``None``
    for a file of anyone else's, a damaged or unreadable one, a folder or a special file."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # never open a FIFO (it would block)
            return None
        with open(path, "rb") as handle:
            head = handle.read(512)
    except OSError:
        return None
    if head.startswith(_HDF5_SIGNATURE):
        return _hdf5_kind(path)
    if head.startswith(_PNG_SIGNATURE):
        return _png_kind(path)
    return next((kind for kind, text in _TEXT_HEADERS.items() if head.startswith(text)), None)


def _hdf5_kind(path: str | os.PathLike) -> str | None:
    """``<kind>`` of the root attributes ``format = "whatif-<kind>"`` and an integer
    ``format_version``, read-only through h5py; any error reading them: ``None``."""
    try:
        import h5py

        with h5py.File(path, "r") as h5:
            name, version = h5.attrs.get("format"), h5.attrs.get("format_version")
    except (ImportError, OSError, KeyError, ValueError, TypeError, RuntimeError):
        return None
    if isinstance(name, bytes):
        name = name.decode("utf-8", "replace")
    if not isinstance(name, str) or not name.startswith("whatif-") or name == "whatif-":
        return None
    if isinstance(version, bool) or not hasattr(version, "__index__"):  # int or numpy integer
        return None
    return name.removeprefix("whatif-")


def _png_kind(path: str | os.PathLike) -> str | None:
    """The kind a ``tEXt`` chunk ``whatif-bench`` names before the image data, or ``None``."""
    try:
        with open(path, "rb") as handle:
            handle.seek(len(_PNG_SIGNATURE))
            for _ in range(_PNG_TEXT_CHUNKS):
                header = handle.read(8)
                if len(header) < 8 or header[4:] in (b"IDAT", b"IEND"):
                    return None
                length = int.from_bytes(header[:4], "big")
                if header[4:] == b"tEXt" and length <= 4096:
                    key, _, text = handle.read(length).partition(b"\0")
                    match = _MARKER.fullmatch(text.decode("latin-1"))
                    if key == TOOL.encode() and match:
                        return match.group(1)
                    handle.seek(4, os.SEEK_CUR)  # the CRC
                else:
                    handle.seek(length + 4, os.SEEK_CUR)
    except OSError:
        return None
    return None


def describe_kind(kind: str) -> str:
    """``"a whatif corpus"`` and the like, for messages."""
    return FILE_KINDS.get(kind, f"a whatif {kind} output")


def check_file_kind(path: str | os.PathLike, kind: str) -> None:
    """Refuse to replace an existing regular file ``path`` unless ``file_kind`` says this
    toolkit wrote it as an output of ``kind``; a missing path (or a folder or special file,
    which ``check_output_path`` refuses) is no problem here."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return
    except OSError:
        return
    found = file_kind(path)
    if found == kind:
        return
    why = (
        f"exists and is not {describe_kind(kind)} (no {TOOL} record in it)"
        if found is None
        else f"holds {describe_kind(found)}, not {describe_kind(kind)}"
    )
    raise OutputError(
        f"{os.fspath(path)}: {why}; refusing to replace it: delete it by hand or choose another "
        "name"
    )


def check_file_output(
    path: str | os.PathLike, kind: str, inputs: Iterable[str | os.PathLike] = ()
) -> Path:
    """``check_output_path(path, inputs)`` and ``check_file_kind(path, kind)``, for a command to
    call before its work; returns the path."""
    checked = check_output_path(path, inputs)
    check_file_kind(checked, kind)
    return checked


@contextlib.contextmanager
def atomic_output(
    path: str | os.PathLike,
    inputs: Iterable[str | os.PathLike] = (),
    lock: bool = True,
    kind: str | None = None,
) -> Iterator[Path]:
    """Lock ``path``, yield a temporary path to write, rename it to ``path`` on success.

    ``kind`` (e.g. ``"corpus"``): an existing file at ``path`` is replaced only if it is this
    toolkit's output of that kind (``check_file_kind``, before locking and again under the
    lock); ``None`` replaces any regular file, for a file inside a folder the toolkit owns.
    Holding the lock, this toolkit's temporaries of ``path`` left by killed runs are removed
    (``remove_stale_temporaries``).

    ``lock=False`` skips the lock (and its ``.<name>.lock`` file) for small outputs whose
    folder the caller already locks, or where two writers racing is harmless: the per-process
    temporary name and the rename still keep the final name complete.

    On any exception (Ctrl-C included) the temporary file is removed and ``path`` is left as it
    was, so the final name only ever holds a complete file. ``OSError`` from the body or the
    rename (disk full, read-only folder) becomes one ``OutputError`` naming the path.
    """
    path = check_output_path(path, inputs)
    if kind is not None:
        check_file_kind(path, kind)  # refused before a lock file is made beside it
    with output_lock(path) if lock else contextlib.nullcontext():
        if kind is not None:
            check_file_kind(path, kind)
        tmp = temporary_path(path)
        if lock:
            remove_stale_temporaries(path, own=tmp)
        try:
            yield tmp
            os.replace(tmp, path)
        except OSError as exc:
            raise OutputError(_describe(exc, path)) from None
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()


def write_text_atomic(
    path: str | os.PathLike, text: str, lock: bool = True, kind: str | None = None
) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through ``atomic_output`` (``lock``, ``kind``);
    returns the path."""
    with atomic_output(path, lock=lock, kind=kind) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


# ---- folder outputs (whatif export, whatif stream, whatif diagnose) --------------------------
MANIFEST = "manifest.json"
IDENTITY = ".whatif-output.json"
TOOL = "whatif-bench"
IDENTITY_VERSION = 1


def identity_record(kind: str, pid: int | None = None) -> dict[str, Any]:
    record: dict[str, Any] = {"tool": TOOL, "kind": kind, "version": IDENTITY_VERSION}
    if pid is not None:
        record["pid"] = pid
    return record


def write_identity(folder: Path, kind: str, pid: int | None = None) -> None:
    """Write the identity record ``folder/.whatif-output.json`` (see ``read_identity``)."""
    text = json.dumps(identity_record(kind, pid), sort_keys=True) + "\n"
    with open(folder / IDENTITY, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def read_identity(folder: Path) -> dict[str, Any] | None:
    """The identity record of a folder this toolkit wrote, or ``None`` (none, not a regular
    file, unreadable, or not ``{"tool": "whatif-bench", "kind": str, "version": 1, ...}``)."""
    record_path = folder / IDENTITY
    try:
        if record_path.is_symlink() or not stat.S_ISREG(record_path.stat().st_mode):
            return None
        if record_path.stat().st_size > 4096:
            return None
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if (
        not isinstance(record, dict)
        or record.get("tool") != TOOL
        or record.get("version") != IDENTITY_VERSION
        or not isinstance(record.get("kind"), str)
    ):
        return None
    return record


def check_folder_output(
    out: Path,
    overwrite: bool,
    what: str = "whatif output folder",
    kind: str | None = None,
    inputs: Iterable[str | os.PathLike] = (),
) -> None:
    """Refuse ``out`` as a folder output that replaces what is there.

    Refused: a symbolic link (or loop), a special file, a file; an existing folder unless
    ``overwrite``; a folder that is or holds an input of the run (by real path); a non-empty
    folder whose identity record (``.whatif-output.json``, written by this toolkit) is missing
    or names another ``kind`` than this output's — a folder of anyone else, or one written by a
    whatif version before the record, is never replaced (the message says to delete it by hand
    or choose another folder). ``what`` (e.g. ``"whatif export"``) names the output.
    """
    check_regular(out, "output")
    if out.is_symlink():
        raise OutputError(f"{out}: is a symbolic link; give the folder itself")
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out}: exists and is not a folder")
    inputs = list(inputs)
    if inputs:
        check_not_inside(out, inputs)
    if not out.exists():
        return
    if not overwrite:
        raise OutputError(f"{out}: already exists; pass --overwrite to replace it")
    check_folder_kind(out, what, kind)


def _an(word: str) -> str:
    return f"{'an' if word[:1] in tuple('aeiou') else 'a'} {word}"


def check_folder_kind(
    out: Path,
    what: str,
    kind: str | None,
    verb: str = "replace",
    ignore: Iterable[str] = (),
    hint: str = "delete it by hand or choose another folder",
) -> None:
    """Refuse the existing folder ``out`` unless it is empty (entries named in ``ignore``
    aside) or its identity record says this toolkit wrote it as an output of ``kind`` (any
    kind when ``None``); the message says ``refusing to <verb> it: <hint>``. ``what`` (e.g.
    ``"whatif export"``) names the output."""
    ignored = set(ignore)
    try:
        empty = not any(entry.name not in ignored for entry in out.iterdir())
    except OSError as exc:
        raise OutputError(_describe(exc, out)) from None
    if empty:
        return
    record = read_identity(out)
    if record is None:
        raise OutputError(
            f"{out}: not empty and not a folder {what} wrote (no {IDENTITY} record); refusing "
            f"to {verb} it: {hint}"
        )
    if kind is not None and record["kind"] != kind:
        raise OutputError(
            f"{out}: holds a whatif {record['kind']} output, not {_an(kind)} one; refusing to "
            f"{verb} it: {hint}"
        )


def file_hashes(folder: Path) -> dict[str, dict[str, Any]]:
    """Size in bytes and SHA-256 of every file under ``folder``, by relative POSIX path (the
    identity record aside)."""
    out = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if path.parent == folder and path.name == IDENTITY:
            continue
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
    """Remove a file or a folder tree, quietly (for this toolkit's own temporaries)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


@contextlib.contextmanager
def atomic_folder(out: Path, check: Callable[[], object], kind: str) -> Iterator[Path]:
    """Yield an empty temporary folder that becomes ``out`` when the block ends without error.

    Under ``output_lock(out)``: ``check()`` runs (it raises if ``out`` may not be written),
    this toolkit's temporaries of killed runs are removed (``remove_stale_temporaries``), the
    block fills the temporary folder (created holding an identity record with this process id,
    rewritten as ``kind``'s record on success), and it is renamed to ``out``. An existing
    ``out`` is moved aside first and removed once the new one is in place, or put back if it
    cannot be. On any failure (Ctrl-C included) the temporary folder is removed and ``out`` is
    left as it was; ``OSError`` (disk full, read-only folder) becomes one ``OutputError``.
    """
    with output_lock(out):
        check()
        remove_stale_temporaries(out)
        tmp = temporary_path(out)
        old = aside_path(out)
        made = False
        try:
            tmp.mkdir()
            made = True
            write_identity(tmp, kind, pid=os.getpid())
            yield tmp
            write_identity(tmp, kind)
            if out.exists():
                os.replace(out, old)
            os.replace(tmp, out)
        except OSError as exc:
            raise OutputError(_describe(exc, out)) from None
        finally:
            if made and tmp.exists():
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
    kind: str = "output",
    inputs: Iterable[str | os.PathLike] = (),
) -> Path:
    """Write the folder ``out`` atomically (``atomic_folder``): ``fill(tmp)`` writes its files
    into the empty temporary folder ``tmp`` and returns the manifest; returns ``out``.

    ``out`` is checked again under the lock (``check_folder_output`` with ``kind`` and
    ``inputs``); ``manifest.json`` (the returned dict plus ``files``, the size and SHA-256 of
    every file) is written and synced last, just before the identity record and the rename.
    """
    inputs = list(inputs)
    with atomic_folder(
        out, lambda: check_folder_output(out, overwrite, what, kind, inputs), kind
    ) as tmp:
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
