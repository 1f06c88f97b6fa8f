"""Figures without pyplot: build a matplotlib ``Figure`` directly and save it as a PNG.

The toolkit never calls ``matplotlib.use`` and never touches pyplot's global state (its current
figure, its list of open figures), so drawing a figure leaves a notebook user's backend and
figures alone. Each ``*_figure`` function of the plotting modules returns a ``Figure``
(Jupyter shows one that is a cell's last value); the ``plot_*`` functions save it with
``save_png``. A ``Figure`` nobody refers to is freed like any object: there is nothing to close.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from whatif_bench.outputs import FIGURE, atomic_output, png_metadata

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def new_figure(
    width: float, height: float, layout: Literal["constrained", "tight"] | None = None
) -> Figure:
    """An empty figure of ``width`` x ``height`` inches, drawn by the Agg renderer on save.

    ``layout`` is matplotlib's layout engine (``None``: the caller places the axes).
    """
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout=layout)


def inch_margins(
    figure: Figure, *, left: float, right: float, bottom: float, top: float
) -> dict[str, float]:
    """``left``/``right``/``bottom``/``top`` margins in inches as the figure fractions
    ``Figure.subplots(gridspec_kw=...)`` takes, for a figure laid out by hand (no layout
    engine): margins that hold labels of fixed font sizes whatever the figure's size."""
    width, height = figure.get_size_inches()
    return {
        "left": left / width,
        "right": 1.0 - right / width,
        "bottom": bottom / height,
        "top": 1.0 - top / height,
    }


def save_png(
    figure: Figure,
    path: str | os.PathLike,
    inputs: Iterable[str | os.PathLike] = (),
    lock: bool = False,
    dpi: int = 110,
    check_existing: bool = True,
) -> Path:
    """Write ``figure`` to ``path`` as a PNG through ``outputs.atomic_output``; returns the path.

    ``inputs`` and ``lock`` are ``atomic_output``'s (never write over an input; lock the name).
    The PNG carries the toolkit's text chunk (``outputs.png_metadata``), and an existing file
    at ``path`` is replaced only if it carries it too (a whatif figure), unless
    ``check_existing=False`` (for a figure inside a folder this toolkit owns).
    """
    kind = FIGURE if check_existing else None
    with atomic_output(path, inputs, lock=lock, kind=kind) as tmp:
        figure.savefig(tmp, dpi=dpi, format="png", metadata=png_metadata(FIGURE))
    return Path(path)


def literal(text: str) -> str:
    """``text`` as matplotlib should draw it: a ``$`` from data would start math text."""
    return text.replace("$", r"\$")


def with_unit(name: str, unit: str) -> str:
    """An axis label ``name [unit]`` (``name [unit unknown]`` when the unit is empty)."""
    return literal(f"{name} [{unit or 'unit unknown'}]")
