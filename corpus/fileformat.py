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
# the HDF5 chunk length (elements) of the flat arrays, in the corpus and in the stream's shards
CHUNK = 16384
USER_REGISTRY = "user_registry"  # the group of user spec texts and forms hashes
# the columns of /pairs, one dataset each, in the order the writer makes them
PAIR_COLUMNS = (
    "pair_id",
    "simulator",
    "target",
    "c_label",
    "e_setting",
    "k",
    "event_length",
    "n_events",
    "context",
    "prediction",
    "window_start",
    "replay_source",
    "kept",
    "drop_reason",
    "min_history_ratio",
    "replay_ratio",
    "novel_ratio",
    "event_offset",
    "factor_offset",
    "kfactor_offset",
    *(f"{name}_offset" for name in DATA_DATASETS),
)
# The index columns that say how the corpus stores a pair (where its arrays start in the
# datasets) and whether it was kept, not what the task is: the evaluation's per_task.parquet
# leaves them out (every task it scores is a kept one).
STORAGE_COLUMNS = ("kept", "drop_reason", *(c for c in PAIR_COLUMNS if c.endswith("_offset")))
# the datasets every group must hold; the reader refuses a file without one of them
REQUIRED = {
    "events": ("start", "direction", "ratio", "factors"),
    "futures": ("replay_factors", "novel_factors"),
    "data": DATA_DATASETS,
}
