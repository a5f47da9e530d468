"""The side-by-side speed demo: the target alone, then the target with a DLite drafter, streaming.

One job per module, each importing only the ones before it:

- :mod:`.settings`: the flags and the DLITE_* / GRADIO_* environment variables app.py reads (:func:`parse_app_args`);
- :mod:`.models`: loading the target, the drafter and the example prompts, with messages a person can act on;
- :mod:`.streaming`: one generation run of a column, streamed chunk by chunk and timed (:func:`stream_run`);
- :mod:`.render`: the HTML and markdown the page shows for the measured columns, and the verdict;
- :mod:`.runner`: the page's handlers (:class:`DemoRunner`), which run the columns one after the other;
- :mod:`.page`: the gradio page (:func:`build_demo`), the only module that imports gradio, inside the function.

So importing this package (or ``dlite_hf``) never imports gradio. Every name below is re-exported here, so
``from dlite_hf.demo import build_demo, DemoRunner, ...`` works as it did when the demo was one module.
"""

from __future__ import annotations

from ..defaults import DEFAULT_TARGET
from .models import (
    EXAMPLE_WORKLOADS,
    FETCH_COMMAND,
    LONG_EXAMPLE_TOKENS,
    DemoModels,
    describe_models,
    dtype_mode,
    load_examples,
    load_models,
    missing_drafter_message,
    missing_target_message,
)
from .page import INTRO, build_demo
from .render import ROUND_COLOURS, context_note, render_stats, render_tokens, verdict
from .runner import DEFAULT_PROMPT, CompareUpdate, DemoRunner
from .settings import ATTENTION_ENV, DRAFTER_ENV, DTYPE_ENV, TARGET_ENV, env_default, parse_app_args
from .streaming import (
    DLITE_LABEL,
    DLITE_LOOKUP_TOKENS,
    GREEDY,
    POLL_S,
    SAMPLING,
    ChunkStreamer,
    ColumnRun,
    StopOnFlag,
    stream_run,
)

__all__ = [
    "ATTENTION_ENV",
    "DEFAULT_PROMPT",
    "DEFAULT_TARGET",
    "DLITE_LABEL",
    "DLITE_LOOKUP_TOKENS",
    "DRAFTER_ENV",
    "DTYPE_ENV",
    "EXAMPLE_WORKLOADS",
    "FETCH_COMMAND",
    "GREEDY",
    "INTRO",
    "LONG_EXAMPLE_TOKENS",
    "POLL_S",
    "ROUND_COLOURS",
    "SAMPLING",
    "TARGET_ENV",
    "ChunkStreamer",
    "ColumnRun",
    "CompareUpdate",
    "DemoModels",
    "DemoRunner",
    "StopOnFlag",
    "build_demo",
    "context_note",
    "describe_models",
    "dtype_mode",
    "env_default",
    "load_examples",
    "load_models",
    "missing_drafter_message",
    "missing_target_message",
    "parse_app_args",
    "render_stats",
    "render_tokens",
    "stream_run",
    "verdict",
]
