"""The side-by-side speed demo: the target alone, then with a DLite drafter, streaming. Modules, each importing only
those before it: models (with the flags), render, runner, page (:func:`build_demo`, the one importer of gradio,
lazily)."""

from __future__ import annotations

from .models import DemoModels, describe_models, dtype_mode, load_models, missing_drafter_message, parse_app_args
from .page import build_demo
from .render import ROUND_COLOURS, render_tokens, verdict
from .runner import ColumnRun, DemoRunner

__all__ = [
    "ROUND_COLOURS",
    "ColumnRun",
    "DemoModels",
    "DemoRunner",
    "build_demo",
    "describe_models",
    "dtype_mode",
    "load_models",
    "missing_drafter_message",
    "parse_app_args",
    "render_tokens",
    "verdict",
]
