"""The side-by-side speed demo: the target alone, then the target with a DLite drafter, streaming.

One job per module, each importing only the ones before it: :mod:`.settings` (app.py's flags and environment
variables), :mod:`.models` (loading the target, drafter and examples), :mod:`.render` (the page's HTML and
markdown), :mod:`.runner` (the columns' timed, streamed runs and the handlers, :class:`DemoRunner`) and :mod:`.page`
(:func:`build_demo`, the only module that imports gradio, inside the function; so importing this package never
imports gradio).
"""

from __future__ import annotations

from .models import DemoModels, describe_models, dtype_mode, load_models, missing_drafter_message
from .page import build_demo
from .render import ROUND_COLOURS, render_tokens, verdict
from .runner import ColumnRun, DemoRunner
from .settings import parse_app_args

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
