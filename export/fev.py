"""Export format `fev` (to be written)."""

from __future__ import annotations


def write(corpus, tasks, folder, progress=True):
    raise NotImplementedError("the fev export is not written yet")
