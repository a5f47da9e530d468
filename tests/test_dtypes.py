"""Reduced precision: the dtype plumbing, the near-tie checker (`dlite_hf.neartie`) and the bfloat16 claims.

float32 is the token-exact mode (every other test file checks exact identity). In bfloat16 a divergence from plain
greedy decoding is allowed only where float32 re-scoring shows a near-tie; the checker must pass real bfloat16 runs
and fail a verification that accepts drafts the target did not choose.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tiny_models import make_drafter, make_tiny_target, write_tiny_training_run

from dlite_hf import DLiteForSpeculation
from dlite_hf.defaults import DEFAULT_DTYPE, DTYPE_CHOICES, check_dtype
from dlite_hf.neartie import (
    NEAR_TIE_EPSILON,
    ScoredContext,
    _gaps,
    _rescored,
    check_near_ties,
    epsilon_for,
    float32_reference,
)

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


# ---------------------------------------------------------------------------------------------------------------------
# plumbing
# ---------------------------------------------------------------------------------------------------------------------


def test_check_dtype_names_what_it_accepts():
    assert [check_dtype(name) for name in DTYPE_CHOICES] == list(DTYPE_CHOICES)
    with pytest.raises(ValueError, match=r"--dtype='fp8' is not a supported dtype: expected one of fastest, float32"):
        check_dtype("fp8", shown="--dtype")
    with pytest.raises(ValueError, match="no near-tie epsilon for dtype 'int8'"):
        epsilon_for("int8")
    assert epsilon_for(torch.bfloat16) == NEAR_TIE_EPSILON["bfloat16"] > epsilon_for("float16") > 0


@pytest.mark.parametrize("argv", [["compare", "--dtype", "half"], ["bench", "--dtype", "half"]])
def test_cli_dtype_flags_refuse_unknown_names(argv, capsys):
    from dlite_hf.cli import main

    with pytest.raises(SystemExit):
        main(argv)
    assert "invalid choice: 'half'" in capsys.readouterr().err


def test_a_drafter_in_another_dtype_than_the_target_is_refused():
    target = make_tiny_target("qwen3", seed=0).to(torch.bfloat16)
    drafter = make_drafter(target, seed=0)  # float32
    with pytest.raises(
        ValueError,
        match=r"drafter is in torch.float32 but the target is in torch.bfloat16.*"
        r"drafter.to\(torch.bfloat16\)",
    ):
        target.generate(torch.tensor([[3, 5, 7]]), max_new_tokens=4, do_sample=False, assistant_model=drafter)


@pytest.mark.parametrize("lookup", [None, 4])
def test_bfloat16_generation_runs_in_bfloat16_end_to_end(lookup):
    """Target and drafter in bfloat16: the drafter computes in bfloat16 and the output is checked near-tie-exact."""
    target = make_tiny_target("qwen3", seed=1).to(torch.bfloat16)
    drafter = make_drafter(target, seed=1).to(torch.bfloat16)
    prompt = torch.tensor([[3, 5, 7, 9, 3, 5, 7]])
    greedy = {"max_new_tokens": 16, "do_sample": False}
    plain = target.generate(prompt, **greedy)
    fast = target.generate(prompt, assistant_model=drafter, prompt_lookup_num_tokens=lookup, **greedy)
    assert drafter.last_generation_stats.rounds > 0
    assert {p.dtype for p in drafter.parameters()} == {torch.bfloat16}
    report = check_near_ties(float32_reference(target), prompt.shape[1], plain, fast, epsilon_for("bfloat16"))
    assert report.ok, report.reason


def test_load_target_and_demo_models_honour_the_dtype(smollm2_dir):
    from dlite_hf.assets import load_target
    from dlite_hf.demo import dtype_mode, load_models

    model, _ = load_target(smollm2_dir, dtype="bfloat16")
    assert model.dtype == torch.bfloat16
    assert load_target(smollm2_dir, dtype="auto")[0].dtype == torch.float32  # the converted checkpoint's own
    from dlite_hf.defaults import resolve_dtype

    assert load_target(smollm2_dir, dtype="fastest")[0].dtype == getattr(torch, resolve_dtype("fastest"))
    with pytest.raises(ValueError, match="'fp8' is not a supported dtype"):
        load_target(smollm2_dir, dtype="fp8")
    models = load_models(str(smollm2_dir), dtype="bfloat16")
    assert models.target.dtype == models.drafter.dtype == torch.bfloat16
    assert dtype_mode(models).startswith("bfloat16: greedy output matches the target alone except at near-ties")
    assert dtype_mode(load_models(str(smollm2_dir), dtype="float32")).startswith("float32: greedy output token-ident")


def test_train_with_a_bfloat16_target(tmp_path, smollm2_dir, monkeypatch):
    """`--target_dtype bfloat16`: the drafter trains on a bfloat16 target's features; its weights stay float32."""
    from dlite_hf.cli import run_train
    from dlite_hf.training.trainer import DLiteTrainer

    seen = []
    honest = DLiteTrainer.__init__

    def spy(self, *args, **kwargs):
        seen.append(kwargs["target"].dtype)
        honest(self, *args, **kwargs)

    monkeypatch.setattr(DLiteTrainer, "__init__", spy)
    base = write_tiny_training_run(tmp_path, smollm2_dir)[1:]
    run_train(base + ["--output_dir", str(tmp_path / "bf16"), "--max_steps", "2", "--target_dtype", "bfloat16"])
    assert seen == [torch.bfloat16]
    drafter = DLiteForSpeculation.from_pretrained(tmp_path / "bf16")
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in drafter.parameters())
    assert json.loads((tmp_path / "bf16" / "dlite_training.json").read_text())["global_step"] == 2


# ---------------------------------------------------------------------------------------------------------------------
# the near-tie checker, analytically on the tiny float32 target (conftest.py)
# ---------------------------------------------------------------------------------------------------------------------


def _greedy_from(target, sequence: torch.Tensor, total: int) -> torch.Tensor:
    return target.generate(sequence, max_new_tokens=total - sequence.shape[1], do_sample=False)


def _ranked(target, sequence: torch.Tensor, rank: int) -> tuple[int, float]:
    """The token of the given rank at the next position, and its gap below the top logit."""
    with torch.no_grad():
        logits = target(sequence).logits[0, -1]
    values, indices = logits.sort(descending=True)
    return int(indices[rank]), float(values[0] - values[rank])


def test_identical_outputs_pass_without_rescoring(target):
    prompt = torch.tensor([[4, 8, 15, 16]])
    plain = _greedy_from(target, prompt, 12)
    report = check_near_ties(None, 4, plain, plain.clone(), epsilon=0.0)  # no reference needed: nothing differs
    assert report.ok and report.identical and report.first_divergence is None


def test_a_divergence_is_a_near_tie_exactly_when_the_top2_margin_is_within_epsilon(target):
    prompt = torch.tensor([[4, 8, 15, 16]])
    plain = _greedy_from(target, prompt, 14)
    d = 3  # the speculative run picks the second-best token at new token 3, then decodes greedily
    second, margin = _ranked(target, plain[:, : 4 + d], rank=1)
    speculative = _greedy_from(target, torch.cat([plain[:, : 4 + d], torch.tensor([[second]])], 1), plain.shape[1])
    gaps, top2 = _gaps(_rescored(target, plain, 4), plain[0, 4:])
    assert float(top2[d]) == pytest.approx(margin, abs=1e-5) and float(gaps.max()) < 1e-5  # plain is the argmax

    report = check_near_ties(target, 4, plain, speculative, epsilon=margin + 1e-4)
    assert report.ok, report.reason
    assert report.first_divergence == d and report.speculative_token == second
    assert report.divergence_margin == pytest.approx(margin, abs=1e-5) == report.top2_margin
    assert report.max_gap == pytest.approx(margin, abs=1e-5) and report.worst_position == d  # then greedy: gap 0

    report = check_near_ties(target, 4, plain, speculative, epsilon=margin - 1e-3)
    assert not report.ok and "at the first divergence (new token 3)" in report.reason


def test_a_wrong_token_after_the_divergence_is_caught(target):
    prompt = torch.tensor([[4, 8, 15, 16]])
    plain = _greedy_from(target, prompt, 14)
    second, margin = _ranked(target, plain[:, :5], rank=1)
    head = torch.cat([plain[:, :5], torch.tensor([[second]])], 1)  # a near-tie at new token 1 (for a wide epsilon)
    head = _greedy_from(target, head, 9)
    last, gap = _ranked(target, head, rank=-1)  # ... then the token the target ranks last, at new token 5
    speculative = _greedy_from(target, torch.cat([head, torch.tensor([[last]])], 1), plain.shape[1])
    assert gap > margin
    epsilon = (margin + gap) / 2
    report = check_near_ties(target, 4, plain, speculative, epsilon=epsilon)
    assert not report.ok and report.first_divergence == 1 and report.worst_position == 5
    assert report.max_gap == pytest.approx(gap, abs=1e-5)
    assert "committed token" in report.reason and "at new token 5" in report.reason


def test_outputs_that_stop_at_different_points_are_not_near_ties(target):
    prompt = torch.tensor([[4, 8, 15, 16]])
    plain = _greedy_from(target, prompt, 12)
    report = check_near_ties(target, 4, plain, plain[:, :-2], epsilon=10.0)
    assert not report.ok and "stopped at new token 6" in report.reason
    with pytest.raises(ValueError, match="do not start with the same prompt"):
        check_near_ties(target, 4, plain, torch.cat([plain[:, :1] + 1, plain[:, 1:]], 1), epsilon=1.0)
    with pytest.raises(ValueError, match="epsilon=-1"):
        check_near_ties(target, 4, plain, plain, epsilon=-1)


def test_a_scored_context_reuses_the_prompt_and_scores_as_a_whole_forward(target):
    """ScoredContext keeps the context's KV cache: a second output on the same prompt, then a longer prompt that
    extends it, then one that shares only its start, each prefill what is new and score as a forward from scratch."""
    plain = _greedy_from(target, torch.tensor([[4, 8, 15, 16, 23, 42]]), 14)
    second, margin = _ranked(target, plain[:, :8], rank=1)
    speculative = _greedy_from(target, torch.cat([plain[:, :8], torch.tensor([[second]])], 1), plain.shape[1])
    context = ScoredContext(target)
    for sequence, start in [(plain, 6), (speculative, 6), (speculative, 9), (plain, 3)]:
        with torch.no_grad():
            whole = target(sequence).logits[0, start - 1 : -1]
        torch.testing.assert_close(context.logits(sequence, start), whole, atol=1e-4, rtol=1e-4)
        assert context.ids == sequence[0, : start - 1].tolist() and context.cache.get_seq_length() == start - 1
    report = check_near_ties(context, 6, plain, speculative, epsilon=margin + 1e-4)
    assert report.ok and report.first_divergence == 2, report.reason


# ---------------------------------------------------------------------------------------------------------------------
# the claims on the real SmolLM2 target in bfloat16
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bf16_smollm2(smollm2_dir):
    from dlite_hf.assets import load_target
    from dlite_hf.defaults import default_drafter_dir

    target, tokenizer = load_target(smollm2_dir, dtype="bfloat16")
    drafter = DLiteForSpeculation.from_pretrained(default_drafter_dir(), dtype=torch.bfloat16).eval()
    return target, tokenizer, drafter, float32_reference(target)


def _prompts(tokenizer, n: int = 3) -> list[torch.Tensor]:
    from dlite_hf.chat_template import chat_prompt_ids
    from dlite_hf.data.prompts import load_prompts

    prompts = [p for w in ("code", "chat", "math") for p in load_prompts(w, "eval", limit=1)][:n]
    return [torch.tensor([chat_prompt_ids(tokenizer, p["messages"])]) for p in prompts]


@pytest.mark.parametrize("method", ["prompt_lookup", "dlite", "hybrid"])
def test_real_bfloat16_divergences_are_near_ties(bf16_smollm2, method):
    target, tokenizer, drafter, reference = bf16_smollm2
    extra = {
        "prompt_lookup": {"prompt_lookup_num_tokens": 8},
        "dlite": {"assistant_model": drafter},
        "hybrid": {"assistant_model": drafter, "prompt_lookup_num_tokens": 32},
    }[method]
    for ids in _prompts(tokenizer):
        plain = target.generate(ids, max_new_tokens=48, do_sample=False)
        fast = target.generate(ids, max_new_tokens=48, do_sample=False, **extra)
        report = check_near_ties(reference, ids.shape[1], plain, fast, epsilon_for("bfloat16"))
        assert report.ok, report.reason


def test_the_checker_fails_a_verification_that_accepts_wrong_drafts(bf16_smollm2):
    """A broken verifier (every draft accepted, whatever the target says) must not pass as near-ties."""
    target, tokenizer, drafter, reference = bf16_smollm2

    def accept_every_draft(module, args, kwargs, output):
        ids = kwargs.get("input_ids", args[0] if args else None)
        logits = output.logits
        if ids is not None and logits.shape[1] == ids.shape[1] > 1:  # verification (the prefill keeps 1 row)
            for i in range(ids.shape[1] - 1):  # position i scores the draft at i + 1
                logits[0, i, ids[0, i + 1]] = logits[0, i].max() + 10
        return output

    failures = []
    for ids in _prompts(tokenizer):
        plain = target.generate(ids, max_new_tokens=48, do_sample=False)
        handle = target.register_forward_hook(accept_every_draft, with_kwargs=True)
        try:
            broken = target.generate(ids, max_new_tokens=48, do_sample=False, assistant_model=drafter)
        finally:
            handle.remove()
        assert drafter.last_generation_stats.accepted == drafter.last_generation_stats.drafted  # all accepted
        report = check_near_ties(reference, ids.shape[1], plain, broken, epsilon_for("bfloat16"))
        failures.append(not report.ok)
    assert all(failures), "accepting every draft went unnoticed on some prompt"


# ---------------------------------------------------------------------------------------------------------------------
# the default mode is the one measured fastest
# ---------------------------------------------------------------------------------------------------------------------


def test_fastest_resolves_by_whether_the_machine_computes_bfloat16_natively(monkeypatch):
    from dlite_hf import defaults

    assert DEFAULT_DTYPE == "fastest"
    assert all(callable(getattr(torch.cpu, probe, None)) for probe in defaults.BF16_PROBES)  # private torch API
    for name in ("float32", "bfloat16", "float16", "auto"):
        assert defaults.resolve_dtype(name) == name  # an explicit choice is kept on any machine
    for native, expected in ((True, "bfloat16"), (False, "float32")):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda native=native: native)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
        assert defaults.native_bfloat16() is native
        assert defaults.resolve_dtype("fastest") == expected
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)  # AMX alone counts too
    assert defaults.resolve_dtype("fastest") == "bfloat16"
    with pytest.raises(ValueError, match="'fp8' is not a supported dtype.*fastest: bfloat16 where"):
        defaults.resolve_dtype("fp8")


def test_the_default_mode_is_the_one_the_committed_benchmarks_measured_fastest(monkeypatch):
    """`make run` and the demo default to `fastest` with DEFAULT_ATTENTION. On each machine whose results say whether
    it computes bfloat16 natively, the mode `fastest` resolves to there is the one whose fastest method has the
    highest tokens/s over every workload, among the modes measured on that machine (tokens/s of two CPUs are not
    comparable). A record says it with `bf16_native`, or with `amx_bf16` true; a record from before those fields
    counts as native when its CPU model is recorded with AMX elsewhere (the Intel Xeon: every session on it had AMX,
    docs/benchmark-machines.md). The first AMD EPYC's runs recorded neither, and another EPYC here has no native
    bfloat16, so those runs are left out rather than guessed."""
    from dlite_hf import defaults

    runs = {
        ("float32", "sdpa"): ["smollm2-135m-main.json"],
        ("bfloat16", "sdpa"): ["smollm2-135m-main-bf16.json"],
        ("float32", "packed_gqa"): [
            "smollm2-135m-main-packed.json",
            "smollm2-135m-main-packed-r2.json",
            "smollm2-135m-dtype-fp32-packed-avx2.json",
        ],
        ("bfloat16", "packed_gqa"): [
            "smollm2-135m-main-bf16-packed.json",
            "smollm2-135m-main-bf16-packed-r2.json",
            "smollm2-135m-main-bf16-packed-r3.json",
            "smollm2-135m-dtype-bf16-packed-avx2.json",
        ],
    }
    records = []
    for (dtype, attention), names in runs.items():
        for name in names:
            result = json.loads((RESULTS / name).read_text())
            assert result["meta"]["dtype"] == dtype and result["ok"] is True
            recorded = result["meta"].get("attention") or "sdpa"  # runs before the field existed used sdpa
            assert (recorded == "sdpa") == (attention == "sdpa"), (name, recorded)
            best = max(r["tok_s"] for r in result["summary"] if r["workload"] == "all")
            records.append((result["meta"]["machine"], (dtype, attention), best))
    with_amx = {machine["cpu"] for machine, _, _ in records if machine.get("amx_bf16") is True}
    by_machine: dict[tuple[str, bool], dict[tuple[str, str], float]] = {}
    for machine, mode, best in records:
        native = machine.get("bf16_native")
        if native is None and machine.get("amx_bf16") is not False:
            native = True if machine.get("amx_bf16") or machine["cpu"] in with_amx else None
        if native is None:
            continue
        modes = by_machine.setdefault((machine["cpu"], native), {})
        modes[mode] = max(best, modes.get(mode, 0.0))
    assert {native for _, native in by_machine} == {True, False}, by_machine  # both kinds of CPU are measured
    for (_, native), modes in by_machine.items():
        monkeypatch.setattr(defaults, "native_bfloat16", lambda device="cpu", native=native: native)
        default = (defaults.resolve_dtype(defaults.DEFAULT_DTYPE), defaults.DEFAULT_ATTENTION)  # on that machine
        assert default in modes and len(modes) > 1, by_machine
        assert max(modes, key=modes.get) == default, by_machine


def test_the_benchmark_checks_every_bfloat16_divergence_and_fails_a_broken_verifier():
    from dlite_hf.bench.methods import BenchMethod
    from dlite_hf.bench.runner import _Runner

    target = make_tiny_target("qwen3", seed=4).to(torch.bfloat16)
    with torch.no_grad():
        target.lm_head.weight.mul_(8.0)  # peaked: a wrong token sits logits below the best
    drafter = make_drafter(target, seed=4).to(torch.bfloat16)
    runner = _Runner(target, None, [BenchMethod("dlite", "dlite", drafter)], max_new_tokens=24)
    assert runner.checker.dtype == "bfloat16" and runner.checker.epsilon == NEAR_TIE_EPSILON["bfloat16"]
    prompt = torch.tensor([[3, 5, 7, 9, 11, 13]])
    plain = target.generate(prompt, max_new_tokens=24, do_sample=False)

    def accept_every_draft(module, args, kwargs, output):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None and output.logits.shape[1] == ids.shape[1] > 1:
            for i in range(ids.shape[1] - 1):
                output.logits[0, i, ids[0, i + 1]] = output.logits[0, i].max() + 10
        return output

    handle = target.register_forward_hook(accept_every_draft, with_kwargs=True)
    try:
        broken = target.generate(prompt, max_new_tokens=24, do_sample=False, assistant_model=drafter)
    finally:
        handle.remove()
    verdict = runner.checker.check(prompt.shape[1], plain, broken)
    assert verdict is not None and not verdict.ok and verdict.max_gap > runner.checker.epsilon
    runner.close()
    fp32 = _Runner(make_tiny_target("qwen3", seed=4), None, [], max_new_tokens=4)
    assert fp32.checker.check(6, plain, broken) is None  # float32: any difference is a failure, no near-tie excuse
    fp32.close()
