"""Export format `llm` (to be written)."""

from __future__ import annotations


def write(corpus, tasks, folder, progress=True):
    raise NotImplementedError("the llm export is not written yet")
