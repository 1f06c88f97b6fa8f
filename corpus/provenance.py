"""The relationship registry a corpus was built with, re-loaded for ``verify`` and ``show``.

A corpus made from the shipped spec files alone records nothing but ``registry_hash``. One made
with ``whatif generate --spec/--forms`` also records ``/user_registry`` (written by
``writer.write_user_registry``): the exact spec texts, and the path and SHA-256 of every forms
module. The spec texts are data and are re-loaded from the file. The forms modules are code:

[design] They are run only when given again (``--forms``), never from the path a corpus names,
as everywhere else in the toolkit user code runs only on explicit request (a corpus file from
elsewhere must not make ``whatif verify`` execute a file of its choosing). Each given module
must hash to the recorded one, in the recorded order; a module edited since is refused with the
two hashes, since pairs rebuilt with other code could not be compared with the stored ones.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from whatif_bench.corpus.fileformat import USER_REGISTRY
from whatif_bench.corpus.reader import Corpus, CorpusError
from whatif_bench.relationships.source import FormsModule, RegistrySource, UserSpec, file_sha256


def registry_hash() -> str:
    """SHA-256 of the shipped relationship spec files (of a corpus built from them alone;
    ``RegistrySource.registry_hash`` covers user spec files and forms modules too)."""
    return RegistrySource().registry_hash()


def recorded_source(corpus: Corpus) -> RegistrySource:
    """The ``RegistrySource`` a corpus records (an empty one for a shipped-only corpus)."""
    h5 = corpus._h5
    if USER_REGISTRY not in h5:
        return RegistrySource()

    def read() -> RegistrySource:
        group = h5[USER_REGISTRY]
        forms = json.loads(group.attrs["forms"])
        specs = tuple(
            UserSpec(str(group[name].attrs["name"]), group[name][()].decode("utf-8"))
            for name in sorted(group)
        )
        modules = tuple(FormsModule(str(m["path"]), str(m["sha256"])) for m in forms)
        return RegistrySource(specs, modules)

    try:
        return corpus._read(f"/{USER_REGISTRY}", read)
    except (ValueError, TypeError, AttributeError) as exc:  # e.g. JSON that is not ours
        raise corpus._damaged(f"cannot read /{USER_REGISTRY} ({exc})") from None


def corpus_source(corpus: Corpus, forms: Iterable[str | os.PathLike] = ()) -> RegistrySource:
    """The corpus's recorded source with its forms modules replaced by the ``forms`` given
    (same count and order, each with the recorded hash), else a ``CorpusError`` saying why."""
    recorded = recorded_source(corpus)
    given = [Path(p) for p in forms]
    names = ", ".join(Path(m.path).name for m in recorded.forms)
    if recorded.forms and not given:
        raise CorpusError(
            f"{corpus.path}: built with user forms module(s) {names}; pass them with --forms "
            "(user code runs only on explicit request)"
        )
    if len(given) != len(recorded.forms):
        recorded_text = f"{len(recorded.forms)} ({names})" if recorded.forms else "none"
        raise CorpusError(
            f"{corpus.path}: {len(given)} forms module(s) given, but the corpus records "
            f"{recorded_text}"
        )
    modules = []
    for path, record in zip(given, recorded.forms, strict=True):
        digest = file_sha256(path)
        if digest != record.sha256:
            raise CorpusError(
                f"--forms {path}: sha256 {digest[:12]}... is not that of the forms module the "
                f"corpus was built with ({record.path}, sha256 {record.sha256[:12]}...): the "
                "module changed since; restore it or generate the corpus again"
            )
        modules.append(FormsModule(str(path.resolve()), digest))
    return RegistrySource(recorded.specs, tuple(modules))


def corpus_registry(corpus: Corpus, forms: Iterable[str | os.PathLike] = ()):
    """(registry, source) of the relationships the corpus was built with (see the module doc)."""
    source = corpus_source(corpus, forms)
    return source.load(), source
