"""What a registry is loaded from, as values: user spec texts and forms modules (by hash).

``RegistrySource`` holds the exact text of every user spec file (loaded after the shipped ones)
and the path and SHA-256 of every forms module. ``whatif generate --spec/--forms`` reads the
files once into one; the corpus records it (``/user_registry``, docs/CORPUS_FORMAT.md) with
``registry_hash()``, the hash of what was actually used; ``whatif verify`` and ``whatif show``
rebuild it from the corpus and the ``--forms`` files given to them.

[design] Worker processes get a ``TargetRef`` (this source and a target's name), not a pickled
``Relationship``, when user forms are involved, and re-load the forms modules by path, checking
their hash. A user form is a numba dispatcher that ``dispatch.current_kernels`` compiles into
kernels chained from the process's ``FORMS``/``EFFECTS`` tables: a pickled relationship would
neither register its forms in the worker's tables (the kernels would not dispatch to them) nor
carry importable compiled code (a module loaded from a file has no importable name). Loading the
module in the worker runs the parent's own code path and compiles the kernels with the same
flags (no fastmath), so pairs are bit for bit those the parent and ``whatif verify`` compute;
the hash check makes a module edited while a run is under way an error, never a silent mix.
A source without forms modules sends relationships as before (they pickle by reference).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from whatif_bench.errors import SpecError

if TYPE_CHECKING:
    from whatif_bench.relationships.engine import Relationship
    from whatif_bench.relationships.registry import Registry

FORMS_LABEL = "form module"  # as plugins.FORM_MODULE: how errors name a forms module


def file_sha256(path: str | os.PathLike, label: str = FORMS_LABEL) -> str:
    """Hex SHA-256 of a file's bytes; a missing or unreadable file is a ``SpecError``."""
    try:
        data = Path(path).read_bytes()
    except IsADirectoryError:
        raise SpecError(f"{label}: {path} is a folder, not a Python file") from None
    except FileNotFoundError:
        raise SpecError(f"{label}: file {path} not found") from None
    except OSError as exc:
        raise SpecError(f"{label}: cannot read {path}: {exc.strerror or exc}") from None
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class UserSpec:
    """One user spec file: ``name`` (the path as given, used in messages) and its exact text."""

    name: str
    text: str


@dataclass(frozen=True)
class FormsModule:
    """One forms module: its absolute ``path`` and the hex SHA-256 of its bytes."""

    path: str
    sha256: str

    def check(self, label: str = FORMS_LABEL) -> None:
        """The file at ``path`` still has this hash, else a ``SpecError`` saying so."""
        now = file_sha256(self.path, label)
        if now != self.sha256:
            raise SpecError(
                f"{label}: {self.path} changed (sha256 {now[:12]}..., recorded "
                f"{self.sha256[:12]}...); restore the module or generate the corpus again"
            )


@dataclass(frozen=True)
class RegistrySource:
    """The shipped spec files plus ``specs`` (in load order) and ``forms`` (in load order)."""

    specs: tuple[UserSpec, ...] = ()
    forms: tuple[FormsModule, ...] = ()

    @classmethod
    def from_files(
        cls, specs: Iterable[str | os.PathLike] = (), forms: Iterable[str | os.PathLike] = ()
    ) -> RegistrySource:
        """Read the spec files' texts and hash the forms modules (nothing is executed)."""
        from whatif_bench.relationships.spec import read_spec_text

        return cls(
            tuple(UserSpec(os.fspath(p), read_spec_text(os.fspath(p))) for p in specs),
            tuple(FormsModule(str(Path(p).resolve()), file_sha256(p)) for p in forms),
        )

    @property
    def is_shipped(self) -> bool:
        """True when nothing but the shipped spec files is used."""
        return not self.specs and not self.forms

    def registry_hash(self) -> str:
        """SHA-256 of the shipped spec files, then (if any) the user spec texts and the forms
        modules' hashes, in order; names and paths are left out (a moved file hashes alike)."""
        from whatif_bench.relationships.registry import builtin_spec_texts

        digest = hashlib.sha256()
        for source, text in builtin_spec_texts():
            digest.update(source.encode() + b"\0" + text.encode() + b"\0")
        for spec in self.specs:
            digest.update(b"spec\0" + spec.text.encode() + b"\0")
        for module in self.forms:
            digest.update(b"forms\0" + module.sha256.encode() + b"\0")
        return digest.hexdigest()

    def load(self, probe: bool = True) -> Registry:
        """The ``Registry`` of this source (one per process and source, kept).

        The forms modules are checked against their hashes and executed first (``probe``:
        each user form used is also called on the rule checks' inputs, in a child process
        with a time limit, as ``whatif relationships check`` does). Errors are ``SpecError``s
        naming the file (and entry and field).
        """
        key = self.registry_hash()
        if key not in _registries:
            _registries[key] = self._load(probe)
        return _registries[key]

    def _load(self, probe: bool) -> Registry:
        from whatif_bench.relationships.plugins import load_form_modules, probe_user_forms
        from whatif_bench.relationships.registry import registry_from_texts

        for module in self.forms:
            module.check()
            known = _loaded_forms.get(module.path)
            if known is not None and known != module.sha256:
                raise SpecError(
                    f"{FORMS_LABEL}: {module.path} was loaded in this process with other "
                    "contents; run in a new process to use the edited module"
                )
        load_form_modules([m.path for m in self.forms], probe=probe)
        for module in self.forms:
            _loaded_forms[module.path] = module.sha256
        registry = registry_from_texts([(s.name, s.text) for s in self.specs])
        if probe and self.forms:
            probe_user_forms(registry)
        return registry

    def declared(self) -> set[tuple[str, str]]:
        """(simulator, target) of every target the user spec files declare."""
        from whatif_bench.relationships.spec import parse_toml, simulator_name

        wanted: set[tuple[str, str]] = set()
        for spec in self.specs:
            document = parse_toml(spec.text, spec.name)
            simulator = simulator_name(document, spec.name)
            wanted |= {(simulator, t["name"]) for t in document.get("targets", [])}
        return wanted


_registries: dict[str, Registry] = {}  # registry hash -> Registry, in this process
_loaded_forms: dict[str, str] = {}  # forms module path -> the sha256 loaded in this process


@dataclass(frozen=True)
class TargetRef:
    """A relationship named by its source and target: what a worker process receives."""

    source: RegistrySource
    simulator: str
    target: str

    def resolve(self) -> Relationship:
        """The relationship, loaded in this process (forms checked, not probed again)."""
        return self.source.load(probe=False).get(self.simulator, self.target)


def portable(relationship: Relationship, source: RegistrySource) -> Relationship | TargetRef:
    """What to send a worker: ``relationship`` itself, or a ``TargetRef`` if user forms are
    loaded (see the module's [design] note)."""
    if not source.forms:
        return relationship
    return TargetRef(source, relationship.simulator, relationship.target)


def resolve(item: Relationship | TargetRef) -> Relationship:
    """The relationship a worker received (``portable``'s inverse)."""
    return item.resolve() if isinstance(item, TargetRef) else item
