"""TabPFN-TS (Prior Labs, ``tabpfn-time-series``) as a toolkit forecaster: ``--models tabpfn-ts``.

TabPFN-TS forecasts by tabular regression: every step of a series is a row, its target the
label, its features the step's running index, calendar features (year and the sine and cosine
of second, minute, hour, weekday, day of month, day of year, week and month) and the sine and
cosine waves of the seasonal periods the library finds in the target's spectrum
(``TABPFN_TS_DEFAULT_FEATURES``; no lagged targets). The history's rows are the regressor's
training set and the horizon's rows its test set, so TabPFN's regressor
(``tabpfn.TabPFNRegressor``, in-context learning over the rows) is fitted once per task.

Covariates: each covariate is one more feature column, its history in the training rows and
its future values, the what-if scenario, in the test rows: they are the library's *known*
covariates (columns present in both its context and its future frame). The columns are named
``covariate_1`` … ``covariate_K`` here, so a covariate named like a generated feature
(``year``, ``running_index``) cannot overwrite it; TabPFN reads the columns by position, not
name. The calendar features need the task's time axis: a task without ``start`` and
``interval_s`` is refused (``ModelError``), as made-up timestamps would be made-up features.

Quantiles: the regressor's output is a distribution over bins, from which the library reads
any quantile levels it is asked for; this adapter asks for the toolkit's nine 0.1 … 0.9 and
passes them through ``common.to_nine_levels`` (levels equal: taken as they are, sorted so
crossed quantiles become a monotone set).

Local only: the adapter runs the ``tabpfn`` package's regressor in this process
(``TabPFNMode.LOCAL``), one task after another on ``device``. It never uses the cloud client
(``TabPFNMode.CLIENT``, ``tabpfn-client``) and never downloads: the checkpoints from v2.5 on
are gated (a licence accepted in a browser and a Hugging Face login), so a missing checkpoint
is a ``ModelError`` that says where to put it. The ``tabpfn-common-utils`` telemetry that the
library sends is switched off (``TABPFN_DISABLE_TELEMETRY=1``) unless the environment already
sets that variable.

Environment: ``tabpfn-time-series`` needs GluonTS, so pandas < 3: it installs only in the
export environment (``.venv-export``), not beside the toolkit's pandas 3.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from whatif_bench.evaluation.forecasters import Forecast, ModelError, TaskInput
from whatif_bench.evaluation.foundation.common import (
    FoundationForecaster,
    check_whole_number,
    import_library,
    library_version,
    to_nine_levels,
)
from whatif_bench.evaluation.metrics import QUANTILE_LEVELS

__all__ = ["DEFAULT_CHECKPOINT", "TABPFN_VERSIONS", "TabPFNTSForecaster"]

#: what ``TabPFNTSPipeline`` loads in local mode by default (tabpfn-time-series 1.3.0 pins
#: TabPFN v3.5, ``defaults.TABPFN_MODEL_VERSION``): this file in TabPFN's model cache folder
DEFAULT_CHECKPOINT = "tabpfn-v3.5-20260909.safetensors"

#: TabPFN model versions (``tabpfn.constants.ModelVersion``) that may stand for their default
#: regressor checkpoint: ``tabpfn-ts:v2`` is TabPFN v2, the model of the TabPFN-TS paper
TABPFN_VERSIONS = ("v2", "v2.5", "v2.6", "v3", "v3.5", "v3.5-fast")

_ENVIRONMENT_NOTE = (
    "tabpfn-time-series needs GluonTS and so pandas < 3: install it in the export environment "
    "(.venv-export, pandas 2.x), not beside pandas 3"
)


class TabPFNTSForecaster(FoundationForecaster):
    """TabPFN-TS on the toolkit's tasks, with the local TabPFN regressor (see the module
    docstring for features, covariates and quantiles).

    Parameters
    ----------
    model
        A checkpoint of TabPFN's regressor: a path to a ``.ckpt`` or ``.safetensors`` file, or
        a bare file name looked up in the working folder and then in TabPFN's model cache
        folder (``TABPFN_MODEL_CACHE_DIR``, else ``~/.cache/tabpfn``), as ``tabpfn`` resolves
        ``model_path``; or a TabPFN version of ``TABPFN_VERSIONS``, for that version's default
        regressor file in the cache folder. Default (``ADAPTERS``): ``DEFAULT_CHECKPOINT``.
        Nothing is downloaded: a checkpoint that is not there is a ``ModelError``.
    device
        ``cpu``, ``cuda``, ``cuda:N`` or ``mps``: where TabPFN runs (its ``device``).
    batch_size
        Tasks per library call (one ``TabPFNTSPipeline.predict``: one featurisation; TabPFN
        still fits each task on its own).
    seed
        TabPFN's ``random_state`` (its ensemble's feature and target transforms) and torch's
        seed before each call.
    name
        The model's name in the results (default ``tabpfn-ts``).
    max_context_length
        Keep only the last this many history steps (the pipeline's ``max_context_length``);
        None: the library's default (32,768 in tabpfn-time-series 1.3.0).
    n_estimators
        TabPFN's ensemble size (forward passes per task); None: the checkpoint's ``"auto"``.

    On a CPU, TabPFN refuses more than 5,000 training rows (1,000 for v2 … v2.6) unless
    ``TABPFN_ALLOW_CPU_LARGE_DATASET=1`` is set; its error says so.
    """

    adapter = "tabpfn-ts"
    package = "tabpfn-time-series"
    extra = "tabpfn"
    install_note = "it installs only beside pandas < 3, as in the export environment, .venv-export"

    def __init__(
        self,
        model: Any = DEFAULT_CHECKPOINT,
        device: str = "cpu",
        batch_size: int = 64,
        seed: int = 0,
        name: str | None = None,
        max_context_length: int | None = None,
        n_estimators: int | None = None,
    ) -> None:
        if not isinstance(model, str | os.PathLike) or not str(model):
            raise ModelError(
                "tabpfn-ts: model must be a TabPFN checkpoint file (a path or a file name in "
                f"TabPFN's cache folder) or a TabPFN version {list(TABPFN_VERSIONS)}, got "
                f"{model!r}"
            )
        check_whole_number("tabpfn-ts", "max_context_length", max_context_length, optional=True)
        check_whole_number("tabpfn-ts", "n_estimators", n_estimators, optional=True)
        super().__init__(str(model), device=device, batch_size=batch_size, seed=seed, name=name)
        self.max_context_length = max_context_length
        self.n_estimators = n_estimators
        self._checkpoint_sha256: str | None = None

    def _identity(self) -> dict:
        identity: dict[str, Any] = {
            "tabpfn_version": library_version("tabpfn"),
            "max_context_length": self.max_context_length,
            "n_estimators": self.n_estimators,
        }
        if self._checkpoint_sha256 is None:
            path = _resolved_checkpoint(self.model_id)
            if path is not None and path.is_file():
                self._checkpoint_sha256 = _file_digest(path)
        if self._checkpoint_sha256 is not None:
            identity["checkpoint_sha256"] = self._checkpoint_sha256
        return identity

    def checkpoint(self) -> Path:
        """The checkpoint file this model loads (``model`` resolved as ``tabpfn`` does); a
        ``ModelError`` when the library is missing or the file is not there."""
        _import_tabpfn_ts()
        path = _resolved_checkpoint(self.model_id)
        if path is None or not path.is_file():
            raise ModelError(_missing_checkpoint_message(self.model_id, path))
        return path

    def _load(self) -> Any:
        os.environ.setdefault("TABPFN_DISABLE_TELEMETRY", "1")
        library = _import_tabpfn_ts()
        regressor = importlib.import_module("tabpfn").TabPFNRegressor
        worker = importlib.import_module("tabpfn_time_series.worker")

        config: dict[str, Any] = {
            "model_path": str(self.checkpoint()),
            "device": self.device,
            "random_state": self.seed,
        }
        if self.n_estimators is not None:
            config["n_estimators"] = self.n_estimators
        options: dict[str, Any] = {"tabpfn_mode": library.TabPFNMode.LOCAL}
        if self.max_context_length is not None:
            options["max_context_length"] = self.max_context_length
        with warnings.catch_warnings():
            # the pipeline warns that a CPU is slow when it picks its own parallel worker;
            # that worker is replaced below
            warnings.filterwarnings("ignore", message="Running TabPFN locally on CPU")
            pipeline = library.TabPFNTSPipeline(tabpfn_model_config=config, **options)
        # One task after another in this process: the library's own worker would fork up to 8
        # processes on a CPU (each loading the model) or one per GPU, whatever ``device`` says.
        pipeline.predictor = library.TimeSeriesPredictor(
            model_adapter=worker.TabPFNModelAdapter(
                model_class=regressor,
                model_config=config,
                tabpfn_output_selection="median",
            ),
            worker_class=worker.CPUParallelWorker,
            worker_kwargs={"num_workers": 1},
        )
        return pipeline

    def frames(self, tasks: list[TaskInput]) -> tuple[Any, Any]:
        """The library's context and future frames of ``tasks`` (one covariate schema): two
        ``TimeSeriesDataFrame`` indexed by (item_id, timestamp), item ``task-0`` … in order.
        The context has ``target`` (C,) and ``covariate_1`` … ``covariate_K`` per task; the
        future has the covariates' future values (H,) per task."""
        import pandas as pd

        library = _import_tabpfn_ts()
        context, future = [], []
        for index, task in enumerate(tasks):
            if task.start is None or not task.interval_s:
                raise ModelError(
                    "tabpfn-ts: a task needs its start time and step (interval_s) for the "
                    f"calendar features; task {task.task_id or index!r} has none"
                )
            times = task.timestamps()
            item = f"task-{index}"
            past = {"target": np.asarray(task.history_target, dtype=np.float64)}
            ahead: dict[str, np.ndarray] = {}
            for k in range(task.history_covariates.shape[0]):
                column = f"covariate_{k + 1}"
                past[column] = np.asarray(task.history_covariates[k], dtype=np.float64)
                ahead[column] = np.asarray(task.future_covariates[k], dtype=np.float64)
            c = task.context_length
            context.append(pd.DataFrame({"item_id": item, "timestamp": times[:c], **past}))
            future.append(pd.DataFrame({"item_id": item, "timestamp": times[c:], **ahead}))
        frame = library.TimeSeriesDataFrame.from_data_frame
        return frame(pd.concat(context, ignore_index=True)), frame(
            pd.concat(future, ignore_index=True)
        )

    def _forecast_group(self, tasks: list[TaskInput]) -> list[Forecast]:
        pipeline = self.loaded()
        context, future = self.frames(tasks)
        levels = [float(level) for level in QUANTILE_LEVELS]
        predicted = pipeline.predict(context, future, quantiles=levels)
        forecasts = []
        for index, task in enumerate(tasks):
            values = predicted.loc[f"task-{index}"][levels].to_numpy(dtype=np.float64)  # (H, 9)
            if values.shape[0] != task.prediction_length:
                raise ValueError(
                    f"tabpfn-ts: {values.shape[0]} forecast steps for a horizon of "
                    f"{task.prediction_length}"
                )
            forecasts.append(Forecast(quantiles=to_nine_levels(levels, values)))
        return forecasts


def _import_tabpfn_ts():
    """``tabpfn_time_series``, or a ``ModelError`` naming the extra and the environment."""
    try:
        return import_library("tabpfn_time_series", "tabpfn-time-series", "tabpfn")
    except ModelError as exc:
        raise ModelError(f"{exc}; {_ENVIRONMENT_NOTE}") from None


def _resolved_checkpoint(model: str) -> Path | None:
    """The checkpoint file ``model`` names, resolved as ``tabpfn`` resolves ``model_path`` (a
    version: its default regressor in the cache folder); None without ``tabpfn``."""
    try:
        tabpfn = importlib.import_module("tabpfn")
        constants = importlib.import_module("tabpfn.constants")
        loading = importlib.import_module("tabpfn.model_loading")
    except ImportError:
        return None
    if model in TABPFN_VERSIONS:
        default = tabpfn.TabPFNRegressor.create_default_for_version(constants.ModelVersion(model))
        return Path(str(default.model_path))
    expanded = os.path.expanduser(model)
    version = loading.resolve_model_version(expanded)
    paths, *_ = loading.resolve_model_path(expanded, which="regressor", version=version.value)
    return Path(paths[0])


def _missing_checkpoint_message(model: str, path: Path | None) -> str:
    where = f" (looked for {path})" if path is not None else ""
    return (
        f"tabpfn-ts: no TabPFN checkpoint {model!r}{where}. This adapter runs TabPFN locally and "
        "never downloads: the v2.5+ checkpoints are gated on Hugging Face (accept the licence "
        f"at https://huggingface.co/Prior-Labs/tabpfn_3_5 for {DEFAULT_CHECKPOINT}), so fetch "
        "the file yourself (e.g. `hf download Prior-Labs/tabpfn_3_5 "
        f"{DEFAULT_CHECKPOINT} --local-dir ~/.cache/tabpfn`) or give a checkpoint path"
    )


def _file_digest(path: Path) -> str:
    """SHA-256 of a checkpoint file, so a changed local checkpoint gets a new fingerprint."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
