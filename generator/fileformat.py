"""The corpus file format's identity, defined once for the writer and the reader.

``FORMAT`` and ``FORMAT_VERSION`` are the file attributes ``format`` and ``format_version``
every corpus carries (docs/CORPUS_FORMAT.md). The reader opens the versions in
``READABLE_VERSIONS`` and refuses any other (a newer toolkit's file, or a damaged attribute)
with one error naming the file and both versions. Change the layout -> bump ``FORMAT_VERSION``
and say here which older versions the reader still reads.
"""

from __future__ import annotations

FORMAT = "whatif-corpus"
FORMAT_VERSION = 1
READABLE_VERSIONS: tuple[int, ...] = (FORMAT_VERSION,)
# the four flat float32 task arrays under /data
DATA_DATASETS = ("history_target", "history_covariates", "future_target", "future_covariates")
