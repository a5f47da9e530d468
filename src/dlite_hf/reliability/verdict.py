"""One randomised case, run plainly and drafted, and its verdict (docs/reliability.md says when each applies).

Both calls refuse (``refused_alike``), or only the drafted one, naming an option of the case (``refused_named``); or
both complete, each output keeps the case's promises (length, bans, n-gram rule, streamed tokens, scores), and then
greedy outputs are ``identical`` or, in reduced precision, differ only at a ``near_tie`` of the *processed* float32
logits; sampled ones are ``sampled_ok`` (their distributions are the chi-square tests' job). Anything else is a
``failure`` with its reason.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass
from typing import Any

import torch
from transformers import GenerationConfig
from transformers.generation.streamers import BaseStreamer

from ..modeling.suffix_index import DraftSession
from ..neartie import NearTieChecker, first_difference
from .cases import Case

__all__ = ["PASSING", "Outcome", "classify", "run_case"]

PASSING = ("identical", "near_tie", "refused_alike", "refused_named", "sampled_ok")
_REFUSALS = (ValueError, NotImplementedError, TypeError)
_CHECKERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # target -> its NearTieChecker (id reuse-safe)


@dataclass
class Outcome:
    """The verdict on one case (``kind`` is one of :data:`PASSING` or ``failure``)."""

    index: int
    kind: str
    reason: str = ""
    workload: str = ""
    new_tokens: int = 0

    @property
    def passed(self) -> bool:
        return self.kind in PASSING


class _Collect(BaseStreamer):
    """A streamer that keeps every token id it is given (the prompt first)."""

    def __init__(self) -> None:
        self.chunks: list[list[int]] = []
        self.ended = False

    def put(self, value: torch.Tensor) -> None:
        self.chunks.append(value.reshape(-1).tolist())

    def end(self) -> None:
        self.ended = True


def _call(target, prompt: torch.Tensor, case: Case, tokenizer, drafter=None) -> tuple[Any, _Collect | None]:
    """One call as the docs say to make it: the options in a ``GenerationConfig`` (the drafter's per-call options
    too, for the drafted call), the tokenizer and streamer as arguments."""
    options = {**case.generation, **(case.drafter if drafter is not None else {})}
    streamer = _Collect() if case.streamer else None
    arguments = {"attention_mask": torch.ones_like(prompt), "streamer": streamer, "assistant_model": drafter}
    if "stop_strings" in options:
        arguments["tokenizer"] = tokenizer
    if case.sampled:
        torch.manual_seed(case.seed)
    in_session = drafter is not None and case.session is not None
    with DraftSession(**case.session) if in_session else contextlib.nullcontext():
        out = target.generate(prompt, generation_config=GenerationConfig(**options), **arguments)
    return out, streamer


def _sequences(out: Any) -> torch.Tensor:
    return out if isinstance(out, torch.Tensor) else out.sequences


def _violations(case: Case, prompt_length: int, out: Any, streamer: _Collect | None, vocab: int) -> list[str]:
    """What an output breaks of the case's promises (empty when it keeps them all)."""
    gen, seq = case.generation, _sequences(out)
    new = seq[0, prompt_length:].tolist()
    found = []
    if len(new) > gen["max_new_tokens"] or not new:
        found.append(f"{len(new)} new tokens for max_new_tokens={gen['max_new_tokens']}")
    if any(not 0 <= t < vocab for t in new):
        found.append("a token id outside the vocabulary")
    if streamer is not None:
        streamed = [t for chunk in streamer.chunks[1:] for t in chunk]
        if streamed != new or not streamer.ended:
            found.append(f"streamed {len(streamed)} tokens (ended={streamer.ended}) for {len(new)} returned")
    if gen.get("return_dict_in_generate"):
        for name in ("scores", "logits"):
            rows = getattr(out, name, None)
            if gen.get(f"output_{name}") and (rows is None or len(rows) != len(new)):
                found.append(f"{0 if rows is None else len(rows)} {name} for {len(new)} new tokens")
    if new and len(new) == gen["max_new_tokens"] and new[-1] == gen.get("forced_eos_token_id"):
        new, seq = new[:-1], seq[:, :-1]  # a forced EOS at the last position overrides every ban: checked without it
    banned = [w[0] for w in gen.get("bad_words_ids", []) if len(w) == 1] + list(gen.get("suppress_tokens", []))
    if set(banned) & set(new):
        found.append(f"banned or suppressed tokens {sorted(set(banned) & set(new))} in the output")
    if new and gen.get("begin_suppress_tokens") and new[0] in gen["begin_suppress_tokens"]:
        found.append(f"begin-suppressed token {new[0]} first")
    size, full = gen.get("no_repeat_ngram_size"), seq[0].tolist()
    if size:
        for end in range(max(prompt_length, size - 1), len(full)):  # each new token's n-gram is new
            gram, before = full[end - size + 1 : end + 1], full[:end]
            if any(before[i : i + size] == gram for i in range(len(before) - size + 1)):
                found.append(f"new token {end - prompt_length} repeats a {size}-gram (no_repeat_ngram_size={size})")
                break
    return found


def _processors(target, case: Case, start: int) -> Any:
    """The logits processors generate() builds for the case's options and a prompt of ``start`` tokens."""
    config, _ = target._prepare_generation_config(None, **dict(case.generation))
    target._prepare_special_tokens(config, kwargs_has_attention_mask=True, device="cpu")
    if config.max_new_tokens is not None:  # as generate() sets it: the forced EOS sits at max_length - 1
        config.max_length = start + config.max_new_tokens
    return target._get_logits_processor(generation_config=config, input_ids_seq_length=start, device="cpu")


def classify(case: Case, plain: Any, drafted: Any) -> tuple[str, str]:
    """(kind, reason) from the two calls' results: each an output or the exception it raised. Pure: the greedy
    comparison of two completed outputs is :func:`_judge`'s."""
    plain_error, drafted_error = isinstance(plain, Exception), isinstance(drafted, Exception)
    if plain_error and drafted_error:
        return "refused_alike", f"{type(plain).__name__} / {type(drafted).__name__}: {str(drafted)[:160]}"
    if drafted_error:
        named = [n for n in [*case.generation, *case.drafter] if n in str(drafted)]
        if isinstance(drafted, _REFUSALS) and named:
            return "refused_named", f"{type(drafted).__name__} naming {named[0]}: {str(drafted)[:160]}"
        return "failure", f"the drafted call raised {type(drafted).__name__}: {drafted} (plain ran)"
    if plain_error:
        return "failure", f"the drafted call ran where plain raised {type(plain).__name__}: {plain}"
    return "", ""


def run_case(target, drafter, tokenizer, prompt: torch.Tensor, case: Case, workload: str = "") -> Outcome:
    """Run ``case`` on ``prompt`` (``[1, n]``) plainly and with ``drafter``, and judge it (see the module doc)."""
    results = []
    for assistant in (None, drafter):
        try:
            results.append(_call(target, prompt, case, tokenizer, assistant))
        except Exception as error:  # noqa: BLE001 - the verdict is about which calls raise, and what
            results.append((error, None))
    (plain, _), (drafted, _) = results
    outcome = Outcome(case.index, *classify(case, plain, drafted), workload)
    if not outcome.kind:
        outcome.new_tokens = _sequences(drafted).shape[1] - prompt.shape[1]
        outcome.kind, outcome.reason = _judge(target, case, prompt.shape[1], results)
    return outcome


def _judge(target, case: Case, start: int, results: list[tuple[Any, _Collect | None]]) -> tuple[str, str]:
    """(kind, reason) of two completed calls, plain then drafted: each ``(output, streamer)``."""
    vocab = target.get_output_embeddings().weight.shape[0]
    for name, (out, stream) in zip(("plain", "drafted"), results):
        if broken := _violations(case, start, out, stream, vocab):
            return "failure", f"the {name} output: " + "; ".join(broken)
    if case.sampled:
        return "sampled_ok", ""
    plain, drafted = (_sequences(out) for out, _ in results)
    a, b = plain[0, start:].tolist(), drafted[0, start:].tolist()
    divergence = first_difference(a, b)
    if divergence is None:
        return "identical", ""
    checker = _CHECKERS.setdefault(target, NearTieChecker(target))  # cheap: its float32 copy is made on first use
    if checker.exact or divergence == min(len(a), len(b)):
        shown = f"({a[divergence : divergence + 3]} plain, {b[divergence : divergence + 3]} drafted)"
        return "failure", f"greedy {checker.dtype} outputs differ at new token {divergence} {shown}"
    report = checker.check(start, plain, drafted, _processors(target, case, start))
    if report.ok:
        return "near_tie", f"new token {divergence}: within {checker.epsilon} of the float32 max"
    return "failure", f"{checker.dtype} divergence: {report.reason}"
