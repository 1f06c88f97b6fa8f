"""The corpus file format's identity, defined once for the writer and the reader.

``FORMAT`` and ``FORMAT_VERSION`` are the file attributes ``format`` and ``format_version``
every corpus carries (docs/CORPUS_FORMAT.md). The reader opens the versions in
``READABLE_VERSIONS`` and refuses any other (a newer toolkit's file, or a damaged attribute)
with one error naming the file and both versions. Change the layout -> bump ``FORMAT_VERSION``
and say here which older versions the reader still reads.
"""

from __future__ import annotations

FORMAT = "whatif-corpus"
# 2: the method as docs/METHOD.md section 5-6 now states it (Novel futures beyond the history's
#    range with the base value counted, zero-baseline windows fail the 10 % rule, the paper's
#    E_max and context extension, OpenDC's covariate order). Version 1 files hold pairs this
#    toolkit would not rebuild the same, so they are not read: generate the corpus again.
FORMAT_VERSION = 2
READABLE_VERSIONS: tuple[int, ...] = (FORMAT_VERSION,)
# the four flat float32 task arrays under /data
DATA_DATASETS = ("history_target", "history_covariates", "future_target", "future_covariates")
