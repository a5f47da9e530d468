"""The demo: its handlers called directly, the running app through gradio_client, and a headless Chromium screenshot.

Everything runs on a tiny seeded Llama (vocab 49152, hidden 32, 2 layers) with the real SmolLM2 tokenizer and a
random DLite drafter, so the suite stays fast on one CPU thread; docs/screenshot.py takes the real page shot.
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from tiny_models import make_drafter, make_smollm_vocab_target

from dlite_hf.demo import (
    ROUND_COLOURS,
    ColumnRun,
    DemoModels,
    DemoRunner,
    load_models,
    missing_drafter_message,
    render_tokens,
)

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = {
    "chat · tiny/1": [{"role": "user", "content": "Tell me about tea."}],
    "agentic · tiny/2": [
        {"role": "system", "content": "You can call get_weather(city)."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}'},
        {"role": "tool", "content": '{"temperature": 21}'},
    ],
}


# the demo's random drafter: 2 tapped layers, 1 layer (tests/tiny_models.py `make_drafter`)
DRAFTER = dict(num_target_layers_tapped=2, num_hidden_layers=1, target_name_or_path="tiny-llama")
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny_models(tokenizer) -> DemoModels:
    target = make_smollm_vocab_target()
    drafter = make_drafter(target, seed=1, **DRAFTER)
    return DemoModels(
        target=target, tokenizer=tokenizer, drafter=drafter, target_name="tiny-llama", drafter_path="(in memory)"
    )


def _final(updates):
    assert updates, "the handler yielded nothing"
    return updates[-1]


# --------------------------------------------------------------------------------------------------------------
# Handlers, called directly
# --------------------------------------------------------------------------------------------------------------


def test_compare_streams_then_outputs_are_identical_under_greedy(tiny_models):
    runner = DemoRunner(tiny_models, EXAMPLES)
    updates = list(runner.compare("Write a haiku about tea.", max_new_tokens=12, prompt_lookup=True))
    final = _final(updates)
    details = final.details
    # streamed: the plain column grew token by token while DLite was still waiting for its turn
    plain_counts = [u.details["plain"]["new_tokens"] for u in updates]
    assert len(set(plain_counts)) >= 6, plain_counts
    assert any("waiting for its turn" in u.dlite_stats for u in updates if 0 < u.details["plain"]["new_tokens"] < 12)
    assert any("running" in u.dlite_stats for u in updates)
    # the runs were one after the other: DLite only started once plain had finished
    first_dlite = next(i for i, u in enumerate(updates) if u.details["dlite"]["new_tokens"] > 0)
    assert updates[first_dlite].details["plain"]["done"]
    # greedy: every method gives the target's own tokens
    plain_ids = details["plain"]["token_ids"]
    assert len(plain_ids) == 12
    assert details["dlite"]["token_ids"] == plain_ids
    assert details["prompt_lookup"]["token_ids"] == plain_ids
    assert final.verdict.count("Identical") == 2
    # statistics in the page: tokens/s and time everywhere; tau, rounds and speedup for DLite
    assert "tok/s" in final.plain_stats and " s " in final.plain_stats
    assert "tau" in final.dlite_stats and "draft rounds" in final.dlite_stats and "speedup" in final.dlite_stats
    stats = details["dlite"]["stats"]
    assert sum(stats["tokens_per_forward"]) == 12 == stats["new_tokens"]
    # the DLite column runs the hybrid (the decoding measured fastest), and its statistics say so
    assert "lookup_rounds" in stats and stats["lookup_time_s"] > 0
    assert stats["rounds"] == stats["lookup_rounds"] + stats["dlite_rounds"]
    assert details["dlite"]["tokens_per_forward"] == stats["tokens_per_forward"]
    assert details["speedup"] > 0
    assert 'class="dlite-tokens"' in final.dlite_html


def test_tokens_are_highlighted_by_target_forward(tokenizer):
    ids = tokenizer("one two three four five six seven", add_special_tokens=False)["input_ids"]
    column = ColumnRun("dlite", "target + DLite")
    sizes = [1, 3, 1, 2]
    column.ids = ids[: sum(sizes)]
    column.regroup(tokenizer, sizes)
    assert column.sizes == sizes
    assert "".join(column.texts) == tokenizer.decode(column.ids)
    html = render_tokens(column, highlight=True)
    # two forwards committed several tokens: two spans, alternating colours; single-token forwards stay plain
    assert html.count('<span style="background:') == 2
    assert html.index(ROUND_COLOURS[0]) < html.index(ROUND_COLOURS[1])
    assert "3 tokens (2 drafted and accepted + 1 from the target)" in html
    assert "background" not in render_tokens(column, highlight=False).split("dlite-tokens")[1].split(">", 1)[1]


def test_sampling_says_outputs_differ_by_design(tiny_models):
    runner = DemoRunner(tiny_models)
    final = _final(list(runner.compare("Hi", max_new_tokens=8, decoding="sampling", temperature=0.9, top_p=0.9)))
    assert "differ by design" in final.verdict and "distribution" in final.verdict
    assert final.details["dlite"]["new_tokens"] == 8 and final.details["plain"]["new_tokens"] == 8


def test_stop_button_stops_the_run(tiny_models):
    runner = DemoRunner(tiny_models)
    updates, pressed = [], False
    for update in runner.compare("Count to one thousand.", max_new_tokens=400, session="visitor-1"):
        updates.append(update)
        if update.details["plain"]["new_tokens"] >= 3 and not pressed:
            assert runner.stop("someone-else") == "Nothing is running."  # another session's Stop does nothing
            assert runner.stop("visitor-1") == "Stopping…"
            pressed = True
    final = _final(updates)
    assert "Stopped" in final.verdict
    assert final.details["plain"]["stopped"] and final.details["plain"]["new_tokens"] < 400
    assert final.details["dlite"]["skipped"] == "Not run: stopped."
    # the lock was released: the next run works
    assert "Identical" in _final(list(runner.compare("Hi", max_new_tokens=4))).verdict


def test_closing_the_handler_stops_the_worker(tiny_models):
    runner = DemoRunner(tiny_models)
    stream = runner.compare("Count to one thousand.", max_new_tokens=400)
    for _ in range(4):
        next(stream)
    stream.close()  # what happens when a browser goes away mid-run
    assert not [t for t in threading.enumerate() if t.name.startswith("dlite-demo-")]
    assert "Identical" in _final(list(runner.compare("Hi", max_new_tokens=4))).verdict


def test_examples_keep_earlier_messages_as_context(tiny_models):
    runner = DemoRunner(tiny_models, EXAMPLES)
    text, context, note = runner.select_example("agentic · tiny/2")
    assert text == '{"temperature": 21}' and context["role"] == "tool" and len(context["messages"]) == 3
    assert "3 earlier messages" in note
    ids = runner.chat_ids(text, context)
    rendered = tiny_models.tokenizer.decode(ids)
    assert "get_weather(city)" in rendered and rendered.count("<|im_start|>") >= 4
    assert runner.select_example(None)[1] is None


def test_missing_target_and_drafter_give_clear_messages(tmp_path, monkeypatch):
    monkeypatch.setenv("DLITE_HF_CACHE", str(tmp_path / "empty-cache"))
    models = load_models("smollm2-135m", tmp_path / "no-drafter")
    assert models.target is None and models.drafter is None
    assert "make assets" in models.target_error and "dlite-hf assets fetch smollm2-135m" in models.target_error
    assert "--drafter PATH" in models.drafter_error and "DLITE_DRAFTER" in models.drafter_error
    final = _final(list(DemoRunner(models).compare("Hi")))
    assert "make assets" in final.verdict and "make assets" in final.plain_html
    unknown = load_models(str(tmp_path / "not-a-model"))
    assert "neither an existing local folder, a Hub id (org/name) nor a known model name" in unknown.target_error
    assert "--target DIR" in unknown.target_error
    shipped = missing_drafter_message(REPO / "drafters" / "dlite-smollm2-135m", default=True)
    assert "drafters/dlite-smollm2-135m" in shipped and "python app.py --drafter PATH" in shipped


def test_page_shows_the_missing_asset_messages(tmp_path, monkeypatch):
    pytest.importorskip("gradio", reason="the demo extra is not installed: pip install -e '.[demo]'")
    from dlite_hf.demo import build_demo

    monkeypatch.setenv("DLITE_HF_CACHE", str(tmp_path / "empty-cache"))
    demo = build_demo("smollm2-135m", tmp_path / "no-drafter")
    texts = [c.get("props", {}).get("value") for c in demo.config["components"]]
    page = "\n".join(t for t in texts if isinstance(t, str))
    assert "Target model missing" in page and "`make assets`" in page
    assert "dlite-hf assets fetch smollm2-135m" in page
    assert "No DLite drafter" in page and "python app.py --drafter PATH" in page


def test_drafter_for_another_target_is_refused(tmp_path, tokenizer):
    target = make_smollm_vocab_target()
    target.save_pretrained(tmp_path / "target")
    tokenizer.save_pretrained(tmp_path / "target")
    make_drafter(make_smollm_vocab_target(num_layers=3), seed=1, **DRAFTER).save_pretrained(tmp_path / "drafter")
    models = load_models(str(tmp_path / "target"), tmp_path / "drafter")
    assert models.target is not None and models.drafter is None
    assert "trained for" in models.drafter_error and "3-layer target" in models.drafter_error
    final = _final(list(DemoRunner(models).compare("Hi", max_new_tokens=4)))
    assert "No DLite drafter loaded" in final.dlite_html and final.details["plain"]["new_tokens"] == 4


@pytest.mark.heavy  # a fresh interpreter: in `make test` and CI, not test-fast
def test_importing_the_package_does_not_import_gradio():
    script = (
        "import sys, runpy\n"
        "import dlite_hf, dlite_hf.demo, dlite_hf.commands.card\n"
        "assert 'gradio' not in sys.modules, 'importing dlite_hf imported gradio'\n"
        "sys.argv = ['app.py', '--help']\n"
        "try:\n"
        "    runpy.run_path('app.py', run_name='app')\n"
        "except SystemExit:\n"
        "    pass\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for flag in ("--target", "--drafter", "--host", "--port", "DLITE_TARGET", "DLITE_DRAFTER"):
        assert flag in out.stdout


def test_app_reads_gradio_server_name_and_port(monkeypatch):
    from dlite_hf.demo import parse_app_args

    assert parse_app_args(argv=[]).port == 7860
    monkeypatch.setenv("GRADIO_SERVER_PORT", "7861")
    monkeypatch.setenv("GRADIO_SERVER_NAME", "0.0.0.0")
    args = parse_app_args(argv=[])
    assert args.port == 7861 and args.host == "0.0.0.0"
    assert parse_app_args(argv=["--port", "7999"]).port == 7999  # the flag wins
    monkeypatch.setenv("GRADIO_SERVER_PORT", "http")
    with pytest.raises(SystemExit, match="GRADIO_SERVER_PORT='http' is invalid"):
        parse_app_args(argv=[])


# --------------------------------------------------------------------------------------------------------------
# The running app
# --------------------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def running_app(tiny_models):
    pytest.importorskip("gradio", reason="the demo extra is not installed: pip install -e '.[demo]'")
    from dlite_hf.demo import build_demo

    demo = build_demo(models=tiny_models, examples=EXAMPLES)
    demo.queue(default_concurrency_limit=1)
    _, url, _ = demo.launch(
        server_name="127.0.0.1", server_port=_free_port(), prevent_thread_lock=True, quiet=True, show_error=True
    )
    try:
        yield demo, url
    finally:
        demo.close()


def test_every_event_has_an_api_name(running_app):
    demo, _ = running_app
    names = [dep.get("api_name") for dep in demo.config["dependencies"]]
    assert names and all(names), names
    assert {"compare", "stop", "select_example", "clear_context", "toggle_lookup"} <= set(names)


def test_app_through_gradio_client(running_app):
    from gradio_client import Client

    _, url = running_app
    client = Client(url, verbose=False)
    try:
        job = client.submit("Write a haiku about tea.", 12, "greedy", 0.7, 0.9, True, 0, api_name="/compare")
        final = job.result(timeout=120)
        streamed = job.outputs()
        assert len(streamed) >= 6  # the updates arrived one by one
        assert streamed[0][6] != final[6]
        verdict, details = final[6], final[7]
        assert verdict.count("Identical") == 2
        assert details["dlite"]["token_ids"] == details["plain"]["token_ids"] == details["prompt_lookup"]["token_ids"]
        assert "tau" in final[3] and "speedup" in final[3]
        text, note = client.predict("agentic · tiny/2", api_name="/select_example")
        assert text == '{"temperature": 21}' and "earlier messages" in note
        client.predict(api_name="/stop")
    finally:
        client.close()


def test_queue_runs_two_visitors_one_after_the_other(running_app):
    from gradio_client import Client

    _, url = running_app
    clients = [Client(url, verbose=False) for _ in range(2)]
    try:
        jobs = [
            c.submit(f"Prompt {i}", 24, "greedy", 0.7, 0.9, False, 0, api_name="/compare")
            for i, c in enumerate(clients)
        ]
        results = [job.result(timeout=120) for job in jobs]
    finally:
        for client in clients:
            client.close()
    for final in results:
        assert "Another generation" not in final[6]  # the runner's own guard never fired: the queue serialised them
        assert "Identical" in final[6]


def _load_screenshot_module():
    spec = importlib.util.spec_from_file_location("dlite_demo_screenshot", REPO / "docs" / "screenshot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_headless_chromium_screenshot_after_a_run(running_app, tmp_path):
    screenshot = _load_screenshot_module()
    if screenshot.find_chromium() is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install -y chromium; or set CHROMIUM=/path)")
    _, url = running_app
    result = screenshot.capture(url, tmp_path / "demo.png", prompt_lookup=True, timeout_s=180)
    data = (tmp_path / "demo.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    assert "Identical" in result["verdict"]


def test_bfloat16_greedy_divergences_are_shown_as_near_ties_not_bugs(tokenizer):
    """In reduced precision the page re-scores a divergent column in float32 instead of calling it a bug."""
    from dlite_hf.demo import verdict
    from dlite_hf.neartie import NearTieReport

    target = make_smollm_vocab_target().to(torch.bfloat16)
    with torch.no_grad():
        target.lm_head.weight.mul_(4.0)
    models = DemoModels(
        target=target,
        tokenizer=tokenizer,
        drafter=make_drafter(target, seed=1, **DRAFTER).to(torch.bfloat16),
    )
    runner = DemoRunner(models, EXAMPLES)
    final = _final(list(runner.compare("Write a haiku about tea.", max_new_tokens=16, prompt_lookup=True)))
    for method in ("dlite", "prompt_lookup"):
        column = final.details[method]
        differs = column["token_ids"] != final.details["plain"]["token_ids"]
        assert ("near_tie" in column) == differs  # re-scored exactly when it differs
        if differs:
            assert column["near_tie"]["ok"], column["near_tie"]["reason"]
    assert "bug" not in final.verdict

    def done(method, ids, report=None):
        return ColumnRun(method, method, ids=ids, done=True, near_tie=report)

    tie = NearTieReport(False, 2, 5, 6, 0.1, 0.1, 0.1, 2, 1.75, True, "")
    wrong = NearTieReport(False, 2, 5, 6, 3.0, 3.0, 3.0, 2, 1.75, False, "not within epsilon")
    columns = [done("plain", [1, 2, 5]), done("dlite", [1, 2, 6], tie), done("lookup", [1, 2, 6], wrong)]
    shown = verdict(columns, "greedy")
    assert "Near-tie" in shown and "0.100 logits apart" in shown
    assert "not at a near-tie: not within epsilon" in shown and "bug" in shown


@pytest.mark.parametrize(("env", "value"), [("DLITE_DTYPE", "half"), ("DLITE_ATTENTION", "flash")])
def test_a_bad_mode_in_the_environment_is_refused_at_start(monkeypatch, env, value):
    from dlite_hf.demo import parse_app_args

    monkeypatch.setenv(env, value)
    with pytest.raises(SystemExit, match=rf"{env}='{value}' is invalid: expected one of"):
        parse_app_args(argv=[])


@pytest.mark.parametrize("native", [True, False])
def test_the_page_says_why_fastest_chose_its_dtype(monkeypatch, native):
    from dlite_hf import defaults
    from dlite_hf.demo import DemoModels, describe_models

    monkeypatch.setattr(defaults, "native_bfloat16", lambda device="cpu": native)
    line = describe_models(DemoModels(dtype="fastest", attention="sdpa"))
    reason = "computes bfloat16 natively" if native else "has no native bfloat16"
    assert "`--dtype fastest`" in line and reason in line
    assert "--dtype fastest" not in describe_models(DemoModels(dtype="float32", attention="sdpa"))
