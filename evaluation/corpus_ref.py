"""The corpus file an evaluation reads, as one reference (its path and its identity when the
evaluation started), and this thread's open reader of it (opened once, for the first chunk).

Every process (thread) that scores chunks opens the corpus once and keeps the reader for its
next chunks: ``CorpusRef.open``. A reader already open goes on reading the file it opened; a
process opening the file later refuses one that changed (a corpus regenerated meanwhile is
renamed into place: a new inode) or went away, with an ``EvaluationError``.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from whatif_bench.corpus import covariate_units
from whatif_bench.evaluation.errors import EvaluationError

if TYPE_CHECKING:
    from whatif_bench.corpus import Corpus

# what tells one corpus file from another at the same path (``file_identity``)
FileIdentity = tuple[int, int, int, int]
# covariate units by (simulator, target), then by covariate name (``covariate_units``)
CovariateUnits = dict[tuple[str, str], dict[str, str]]

# This thread's open corpus: (path, identity, reader, covariate units), or absent. A worker
# process opens the corpus once, for its first chunk, and keeps it for the next ones.
READER = threading.local()


def file_identity(path: str | os.PathLike) -> FileIdentity:
    """What tells one corpus file from another at the same path: device, inode, size and
    modification time (ns)."""
    stat = os.stat(path)
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


def open_reader(
    path: str, identity: FileIdentity | None = None, units: CovariateUnits | None = None
) -> tuple[Corpus, CovariateUnits, FileIdentity]:
    """The open reader of the corpus ``path``, its covariate units (see ``covariate_units``) and
    the file's identity (``file_identity``); opened on first use in this process (thread) and
    kept for the next chunks.

    ``identity`` is the file's identity when the evaluation started (None: whatever is there
    now, always opened anew). A reader already open goes on reading the file it opened;
    opening a file that has changed since (regenerated in the meantime) or gone is an
    ``EvaluationError``. ``units``: the units found when the evaluation started, which a worker
    process is sent instead of loading the relationship registry (and numba) to find them
    again (None: found here)."""
    from whatif_bench.corpus import Corpus

    cached = getattr(READER, "value", None)
    if identity is not None and cached is not None and cached[:2] == (path, identity):
        return cached[2], cached[3], identity
    close_corpus_reader()
    if identity is not None:
        try:
            found = file_identity(path)
        except OSError:
            found = None
        if found != identity:
            raise EvaluationError(
                f"{path}: the corpus changed (or went away) while it was being evaluated; run "
                "the evaluation again"
            )
    corpus = Corpus(path)  # a CorpusError says why a file cannot be read
    try:
        identity = identity or file_identity(path)
        units = covariate_units(corpus.attrs) if units is None else units
    except BaseException:
        corpus.close()
        raise
    READER.value = (path, identity, corpus, units)
    return corpus, units, identity


def close_corpus_reader() -> None:
    """Close this thread's open corpus reader, if any."""
    cached = getattr(READER, "value", None)
    READER.value = None
    if cached is not None:
        cached[2].close()


@dataclass(frozen=True)
class CorpusRef:
    """The corpus of one evaluation: the file's ``path``, its ``identity`` and its covariate
    ``units`` when the evaluation started (None: found by the process that opens it). It is
    what a chunk is sent with (small, picklable); the process that scores the chunk opens the
    file through it (``open``)."""

    path: str
    identity: FileIdentity
    units: CovariateUnits | None = None

    @classmethod
    def start(cls, path: str) -> CorpusRef:
        """The corpus at ``path`` as it is now, opened as this thread's reader (any reader open
        before is closed): the evaluation's start. A file that cannot be read is a
        ``CorpusError``."""
        _, units, identity = open_reader(path)
        return cls(path, identity, units)

    def open(self) -> tuple[Corpus, CovariateUnits]:
        """This thread's reader of the corpus and its covariate units, opened on first use
        (``open_reader``: a file changed since the start is an ``EvaluationError``)."""
        corpus, units, _ = open_reader(self.path, self.identity, self.units)
        return corpus, units
