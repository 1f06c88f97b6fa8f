"""Whether numba has already compiled a module's cached kernels to disk, so that the first run
on a machine can say that it is compiling instead of sitting at 0 % for a minute or more.

numba keeps one index file per cached kernel (``__pycache__/<module>.<kernel>-<line>.py311.nbi``,
or under ``NUMBA_CACHE_DIR``); a kernel whose index is missing is compiled, and written there,
on its first call. The index path is read from numba's cache object, which is not a public
interface: where it cannot be read (another numba release, ``NUMBA_DISABLE_JIT=1``) the module
counts as compiled, so the worst case is a notice not shown, never a wrong one.
"""

from __future__ import annotations

import os
import sys
from types import ModuleType

# the notice the long jobs print on a first run (one line, on the error stream)
NOTICE = (
    "note: compiling the {what} with numba: the first run on this machine takes a minute or "
    "two before the bar moves (they are cached on disk afterwards)"
)


def _index_paths(module: ModuleType) -> list[str]:
    """The index files of ``module``'s disk-cached kernels (those numba exposes)."""
    paths = []
    for value in vars(module).values():
        # a dispatcher made with cache=True holds a cache with an index file; others do not
        cache_file = getattr(getattr(value, "_cache", None), "_cache_file", None)
        index = getattr(cache_file, "_index_path", None)
        if isinstance(index, str):
            paths.append(index)
    return paths


def compiled_on_disk(*modules: ModuleType) -> bool:
    """True when every disk-cached kernel of ``modules`` has its numba index file."""
    return all(os.path.exists(path) for module in modules for path in _index_paths(module))


def announce_first_compilation(what: str, *modules: ModuleType, enabled: bool = True) -> bool:
    """Print ``NOTICE`` for ``what`` when ``modules`` are not compiled yet; returns whether it
    printed."""
    if not enabled or compiled_on_disk(*modules):
        return False
    print(NOTICE.format(what=what), file=sys.stderr, flush=True)
    return True
