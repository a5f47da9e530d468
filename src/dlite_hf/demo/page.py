"""The demo's page: :func:`build_demo` lays the gradio `Blocks` out and wires its events to a :class:`DemoRunner`.

gradio is imported only inside :func:`build_demo`, so importing this module (or ``dlite_hf``) never imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from ..defaults import DEFAULT_ATTENTION, DEFAULT_DTYPE, DEFAULT_TARGET
from .models import DemoModels, describe_models, load_examples, load_models
from .runner import DEFAULT_PROMPT, DemoRunner
from .streaming import DLITE_LOOKUP_TOKENS, GREEDY, SAMPLING

INTRO = """\
Speculative decoding with a **DLite** drafter: every round the drafter reads the target's latest hidden states,
keeps **no KV cache and no history**, and drafts a block of {k} tokens that the target checks in one forward.
{hybrid}Under greedy decoding the output is **token-for-token the target's own**; only the speed changes.

The columns run **one after the other**, not at the same time: on a small CPU two concurrent generations share
the cores, so both timings (and the speedup) would be meaningless. The queue serves one request at a time for the
same reason. In the DLite and prompt-lookup columns, each coloured span is **one target forward that committed
several tokens** (drafted tokens the target accepted, plus its own next token); colours alternate from one round
to the next; plain text marks forwards that committed a single token. Hover a span for its round.
"""


def build_demo(
    target: str = DEFAULT_TARGET,
    drafter: str | Path | None = None,
    *,
    models: DemoModels | None = None,
    examples: dict[str, list[dict[str, str]]] | None = None,
    warm_up: bool = False,
    dtype: str = DEFAULT_DTYPE,
    attention: str = DEFAULT_ATTENTION,
) -> Any:
    """The gradio page (a `gr.Blocks`). Pass ``models`` (and ``examples``) to use already-loaded models;
    ``dtype`` and ``attention``: how to load them otherwise.

    Every event has an ``api_name``: ``compare`` (generator, queued with concurrency 1), ``stop``,
    ``select_example``, ``clear_context``, ``toggle_lookup``.
    """
    import gradio as gr

    if models is None:
        models = load_models(target, drafter, dtype=dtype, attention=attention)
    examples, examples_note = _examples(models, examples)
    runner = DemoRunner(models, examples)
    if warm_up:
        runner.warm_up()
    handlers = _handlers(gr, runner)
    with gr.Blocks(title="DLite: target alone vs target + DLite") as demo:
        _header(gr, models)
        context = gr.State(None)
        with gr.Row():
            prompt, example, clear, note = _prompt_column(gr, examples, examples_note)
            settings = _settings_column(gr)
        outputs = _output_columns(gr)
        inputs = [prompt, context, *settings.values]
        _wire(handlers, inputs, outputs, prompt=prompt, example=example, clear=clear, note=note, settings=settings)
    demo.runner = runner  # for tests and scripts
    return demo


def _examples(
    models: DemoModels, examples: dict[str, list[dict[str, str]]] | None
) -> tuple[dict[str, list[dict[str, str]]], str | None]:
    """(the example prompts, a note to show instead when there are none yet)."""
    if examples is None and models.target is None:
        return {}, "Example prompts appear once the target model is available."
    if examples is None:
        return load_examples(models.tokenizer)
    return examples, None


class _Handlers(NamedTuple):
    compare: Callable[..., Any]
    stop: Callable[..., Any]
    select_example: Callable[..., Any]
    clear_context: Callable[..., Any]
    toggle_lookup: Callable[..., Any]


def _handlers(gr: Any, runner: DemoRunner) -> _Handlers:
    """The page's event handlers, each a thin call into ``runner`` (one state per visitor's session)."""

    def session_of(request: gr.Request | None) -> str:
        return getattr(request, "session_hash", None) or "default"

    def compare(
        prompt, context, max_new_tokens, decoding, temperature, top_p, prompt_lookup, seed, request: gr.Request
    ):
        for update in runner.compare(
            prompt, context, max_new_tokens, decoding, temperature, top_p, prompt_lookup, seed, session_of(request)
        ):
            yield tuple(update)

    def stop(request: gr.Request) -> None:
        runner.stop(session_of(request))

    # gradio finds the request parameter by its type hint; with postponed annotations the hint is the string
    # "gr.Request", which it cannot resolve from this module's globals, so give it the class itself.
    compare.__annotations__["request"] = stop.__annotations__["request"] = gr.Request

    def select_example(label):
        return runner.select_example(label)

    def clear_context():
        return None, ""

    def toggle_lookup(enabled):
        return gr.update(visible=bool(enabled))

    return _Handlers(compare, stop, select_example, clear_context, toggle_lookup)


def _header(gr: Any, models: DemoModels) -> None:
    """The title, the models line, what is missing, and the introduction."""
    gr.Markdown("# DLite speed demo: the target alone vs the target with a DLite drafter")
    gr.Markdown(describe_models(models), elem_id="model-line")
    if models.target_error:
        gr.Markdown(f"### ⚠ Target model missing\n{models.target_error}", elem_id="target-error")
    if models.drafter_error:
        gr.Markdown(f"### ⚠ No DLite drafter\n{models.drafter_error}", elem_id="drafter-error")
    k = models.drafter.config.num_draft_tokens if models.drafter is not None else 7
    hybrid = (
        f"The DLite column runs the **hybrid**: a round whose context already contains what comes next (a "
        f"copied file, a repeated call) drafts up to {DLITE_LOOKUP_TOKENS} tokens retrieved from a suffix index "
        "of the context instead; every other round asks the drafter. "
        if DLITE_LOOKUP_TOKENS
        else ""
    )
    gr.Markdown(INTRO.format(k=k, hybrid=hybrid))


def _prompt_column(gr: Any, examples: dict, examples_note: str | None) -> tuple[Any, Any, Any, Any]:
    """(prompt box, example dropdown, clear-context button, context note): the left column."""
    with gr.Column(scale=3):
        prompt = gr.Textbox(
            value=DEFAULT_PROMPT, label="Prompt (sent as the user message, chat template applied)", lines=5
        )
        with gr.Row():
            example = gr.Dropdown(
                choices=list(examples),
                value=None,
                label="Example prompts (evaluation split: chat, code, math, tool call, agentic, long context)",
                scale=4,
            )
            clear = gr.Button("Clear context", scale=1, size="sm")
        note = gr.Markdown("", elem_id="context-note")
        if examples_note:
            gr.Markdown(f"_{examples_note}_")
    return prompt, example, clear, note


class _Settings(NamedTuple):
    """The right column: the generation settings (the compare handler's inputs after the prompt and context, in
    its order) and the run / stop buttons."""

    max_new_tokens: Any
    decoding: Any
    temperature: Any
    top_p: Any
    prompt_lookup: Any
    seed: Any
    run: Any
    stop: Any

    @property
    def values(self) -> list[Any]:
        return [self.max_new_tokens, self.decoding, self.temperature, self.top_p, self.prompt_lookup, self.seed]


def _settings_column(gr: Any) -> _Settings:
    with gr.Column(scale=2):
        max_new_tokens = gr.Slider(8, 512, value=96, step=8, label="Max new tokens")
        decoding = gr.Radio([GREEDY, SAMPLING], value=GREEDY, label="Decoding")
        with gr.Row():
            temperature = gr.Slider(0.05, 2.0, value=0.7, step=0.05, label="Temperature (sampling)")
            top_p = gr.Slider(0.05, 1.0, value=0.9, step=0.05, label="Top-p (sampling)")
        seed = gr.Number(value=0, precision=0, label="Seed (sampling)")
        prompt_lookup = gr.Checkbox(
            value=False, label="Also run prompt lookup (a third column)", elem_id="lookup-checkbox"
        )
        with gr.Row():
            run = gr.Button("Run", variant="primary", elem_id="run-button")
            stop_button = gr.Button("Stop", variant="stop", elem_id="stop-button")
    return _Settings(max_new_tokens, decoding, temperature, top_p, prompt_lookup, seed, run, stop_button)


class _Outputs(NamedTuple):
    """What the compare handler updates, in its order, and the column prompt lookup shows or hides."""

    components: list[Any]
    lookup_column: Any


def _output_columns(gr: Any) -> _Outputs:
    """The verdict, the three columns (target alone, + DLite, + prompt lookup) and the raw numbers."""
    result = gr.Markdown("", elem_id="verdict")
    with gr.Row(equal_height=False):
        with gr.Column():
            gr.Markdown("### Target alone")
            plain_html = gr.HTML("", elem_id="plain-output")
            plain_stats = gr.Markdown("", elem_id="plain-stats")
        with gr.Column():
            gr.Markdown("### Target + DLite")
            dlite_html = gr.HTML("", elem_id="dlite-output")
            dlite_stats = gr.Markdown("", elem_id="dlite-stats")
        with gr.Column(visible=False) as lookup_column:
            gr.Markdown("### Target + prompt lookup")
            lookup_html = gr.HTML("", elem_id="lookup-output")
            lookup_stats = gr.Markdown("", elem_id="lookup-stats")
    with gr.Accordion("Raw numbers (JSON)", open=False):
        details = gr.JSON(label="Last run")
    components = [plain_html, plain_stats, dlite_html, dlite_stats, lookup_html, lookup_stats, result, details]
    return _Outputs(components, lookup_column)


def _wire(
    handlers: _Handlers,
    inputs: list[Any],
    outputs: _Outputs,
    *,
    prompt: Any,
    example: Any,
    clear: Any,
    note: Any,
    settings: _Settings,
) -> None:
    """Every event, each with its ``api_name``; the generations share one queue slot."""
    context = inputs[1]
    queued = dict(concurrency_limit=1, concurrency_id="generation")
    settings.run.click(handlers.compare, inputs, outputs.components, api_name="compare", **queued)
    prompt.submit(handlers.compare, inputs, outputs.components, api_name="compare_on_submit", **queued)
    settings.stop.click(handlers.stop, None, None, api_name="stop", queue=False)
    example.change(handlers.select_example, example, [prompt, context, note], api_name="select_example", queue=False)
    clear.click(handlers.clear_context, None, [context, note], api_name="clear_context", queue=False)
    settings.prompt_lookup.change(
        handlers.toggle_lookup, settings.prompt_lookup, outputs.lookup_column, api_name="toggle_lookup", queue=False
    )
