"""Foundation-model adapters: pretrained forecasters run through their own libraries.

Each adapter lives in a module of its own, imported only when the model is asked for, and
needs its library (an extra of this package)::

    whatif evaluate whatif-corpus.h5 --models naive,chronos2,timesfm:google/timesfm-2.5-200m-pytorch --out results/

or from Python::

    from whatif_bench.evaluation.foundation import foundation_model
    model = foundation_model("chronos2", "amazon/chronos-2", device="cpu", batch_size=64)

``ADAPTERS`` lists them; ``foundation_model`` builds one by name and says which ``pip install``
a missing library needs. docs/MODELS.md says how each passes covariates and maps its quantiles.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

__all__ = ["ADAPTERS", "Adapter", "foundation_model", "is_adapter_name"]


@dataclass(frozen=True)
class Adapter:
    """One foundation-model adapter: where its class is, its default checkpoint, the extra
    that installs its library and the environment it installs into."""

    module: str  # under whatif_bench.evaluation.foundation
    cls: str
    default_model: str
    extra: str
    summary: str


ADAPTERS: dict[str, Adapter] = {
    "chronos2": Adapter(
        "chronos2",
        "Chronos2Forecaster",
        "amazon/chronos-2",
        "chronos",
        "Amazon's Chronos-2 (chronos-forecasting): past and future covariates in context",
    ),
    "timesfm": Adapter(
        "timesfm",
        "TimesFMForecaster",
        "google/timesfm-2.5-200m-pytorch",
        "timesfm",
        "Google's TimesFM 2.5 (timesfm): covariates by in-context regression",
    ),
    "tabpfn-ts": Adapter(
        "tabpfn_ts",
        "TabPFNTSForecaster",
        "tabpfn-v3.5-20260909.safetensors",
        "tabpfn",
        "TabPFN-TS (tabpfn-time-series): covariates as tabular features; needs pandas < 3",
    ),
}


def is_adapter_name(name: str) -> bool:
    """Whether ``name`` (the part of a ``--models`` item before any ``:``) names an adapter."""
    return name in ADAPTERS


def foundation_model(adapter: str, model: str | None = None, **options):
    """The adapter named ``adapter`` (a key of ``ADAPTERS``) on checkpoint ``model`` (a Hugging
    Face id or a local folder; default: the adapter's ``default_model``), with the adapter's
    keyword ``options`` (``device``, ``batch_size``, ``seed``, ``name``, ...). Nothing is loaded
    until the model first predicts. An unknown name lists the valid ones; a missing library
    says which extra to install (``ModelError``)."""
    from whatif_bench.evaluation.forecasters import ModelError

    if adapter not in ADAPTERS:
        raise ModelError(f"unknown foundation model {adapter!r}; adapters: {list(ADAPTERS)}")
    entry = ADAPTERS[adapter]
    module = importlib.import_module(f"{__name__}.{entry.module}")
    factory = getattr(module, entry.cls)
    return factory(model or entry.default_model, **options)
