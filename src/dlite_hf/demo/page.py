"""The demo's page: :func:`build_demo` lays the gradio `Blocks` out and wires its events to a :class:`DemoRunner`
(gradio is imported inside it, so importing this module never imports gradio).

No ``from __future__ import annotations`` here: gradio finds the handlers' ``request`` parameter by its type hint,
which must be the ``gr.Request`` class itself, not a string.
"""

from pathlib import Path
from typing import Any

from ..defaults import DEFAULT_ATTENTION, DEFAULT_DTYPE, DEFAULT_TARGET
from ..modeling.decoding_options import DEFAULT_LOOKUP_TOKENS
from .models import GREEDY, SAMPLING, DemoModels, describe_models, load_examples, load_models
from .runner import DEFAULT_PROMPT, DemoRunner

INTRO = """\
Speculative decoding with a **DLite** drafter: every round the drafter reads the target's latest hidden states,
keeps **no KV cache and no history**, and drafts a block of {k} tokens that the target checks in one forward.
The DLite column runs the **hybrid**: a round whose context already contains what comes next (a copied file, a \
repeated call) drafts up to {lookup} tokens retrieved from a suffix index of the context instead; every other \
round asks the drafter. Under greedy decoding the output is **token-for-token the target's own**; only the speed \
changes.

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
    """The gradio page (a `gr.Blocks`), on ``models`` (and ``examples``) when given. Every event has an ``api_name``:
    ``compare`` (queued with concurrency 1), ``compare_on_submit``, ``stop``, ``select_example``, ``clear_context``,
    ``toggle_lookup``."""
    import gradio as gr

    if models is None:
        models = load_models(target, drafter, dtype=dtype, attention=attention)
    examples_note = None
    if examples is None:
        examples, examples_note = load_examples(models.tokenizer)
    runner = DemoRunner(models, examples)
    if warm_up:
        runner.warm_up()
    compare, stop, select_example = _handlers(gr, runner)
    with gr.Blocks(title="DLite: target alone vs target + DLite") as demo:
        _header(gr, models)
        context = gr.State(None)
        with gr.Row():
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
            settings, prompt_lookup, run, stop_button = _settings_column(gr)
        # the outputs in the compare handler's order: the three columns' tokens and numbers, the verdict, raw numbers
        verdict = gr.Markdown("", elem_id="verdict")
        columns = []
        with gr.Row(equal_height=False):
            for key, title in (("plain", "alone"), ("dlite", "+ DLite"), ("lookup", "+ prompt lookup")):
                with gr.Column(visible=key != "lookup") as lookup_column:  # the last one: the prompt-lookup column
                    gr.Markdown(f"### Target {title}")
                    columns += [gr.HTML("", elem_id=f"{key}-output"), gr.Markdown("", elem_id=f"{key}-stats")]
        with gr.Accordion("Raw numbers (JSON)", open=False):
            details = gr.JSON(label="Last run")
        outputs = [*columns, verdict, details]
        inputs = [prompt, context, *settings]
        queued = dict(concurrency_limit=1, concurrency_id="generation")
        run.click(compare, inputs, outputs, api_name="compare", **queued)
        prompt.submit(compare, inputs, outputs, api_name="compare_on_submit", **queued)
        stop_button.click(stop, None, None, api_name="stop", queue=False)
        example.change(select_example, example, [prompt, context, note], api_name="select_example", queue=False)
        clear.click(lambda: (None, ""), None, [context, note], api_name="clear_context", queue=False)
        prompt_lookup.change(
            lambda on: gr.update(visible=bool(on)), prompt_lookup, lookup_column, api_name="toggle_lookup", queue=False
        )
    demo.runner = runner  # for tests and scripts
    return demo


def _handlers(gr: Any, runner: DemoRunner) -> tuple[Any, Any, Any]:
    """The compare, stop and select_example handlers: thin calls into ``runner`` (one state per visitor's session)."""

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

    def select_example(label):  # not the method itself: the API page would show its docstring
        return runner.select_example(label)

    return compare, stop, select_example


def _header(gr: Any, models: DemoModels) -> None:
    """The title, the models line, what is missing, and the introduction."""
    gr.Markdown("# DLite speed demo: the target alone vs the target with a DLite drafter")
    gr.Markdown(describe_models(models), elem_id="model-line")
    if models.target_error:
        gr.Markdown(f"### ⚠ Target model missing\n{models.target_error}", elem_id="target-error")
    if models.drafter_error:
        gr.Markdown(f"### ⚠ No DLite drafter\n{models.drafter_error}", elem_id="drafter-error")
    k = models.drafter.config.num_draft_tokens if models.drafter is not None else 7
    gr.Markdown(INTRO.format(k=k, lookup=DEFAULT_LOOKUP_TOKENS))


def _settings_column(gr: Any) -> tuple[list[Any], Any, Any, Any]:
    """(the generation settings in the compare handler's order, the prompt-lookup box, run, stop): the right column."""
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
            stop = gr.Button("Stop", variant="stop", elem_id="stop-button")
    return [max_new_tokens, decoding, temperature, top_p, prompt_lookup, seed], prompt_lookup, run, stop
