"""Random option mixes for ``generate()``: what a user can pass, drawn from a seed, one :class:`Case` at a time.

The same seed and context give the same cases; nothing here runs a model (:mod:`~dlite_hf.reliability.verdict` does).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["FAMILIES", "Case", "Context", "draw_case"]

_SAMPLING = ("temperature", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff")


@dataclass(frozen=True)
class Context:
    """What the drawers may pick from: the target's vocabulary size, its EOS ids and a few common token ids (the
    prompt's own tokens, so that stops, biases and bans actually fire)."""

    vocab_size: int
    eos_ids: tuple[int, ...]
    common_ids: tuple[int, ...]
    stop_texts: tuple[str, ...] = (".", "\n", " the", ":")


@dataclass
class Case:
    """One randomised ``generate()`` call, run plainly and drafted.

    ``generation``: keyword arguments of both calls (``max_new_tokens`` always among them); ``drafter``: per-call
    drafter options, drafted call only; ``session``: the drafted call's ``DraftSession`` arguments (None: none);
    ``streamer``: both calls stream their tokens; ``seed``: torch's seed before each call (sampled cases)."""

    index: int
    families: list[str] = field(default_factory=list)
    generation: dict[str, Any] = field(default_factory=dict)
    drafter: dict[str, Any] = field(default_factory=dict)
    sampled: bool = False
    session: dict[str, Any] | None = None
    streamer: bool = False
    seed: int = 0

    def describe(self) -> dict[str, Any]:
        """A JSON-ready record of the case (``sequence_bias`` as ``[token ids, bias]`` pairs)."""
        record = asdict(self)
        bias = record["generation"].get("sequence_bias")
        if bias is not None:
            record["generation"]["sequence_bias"] = [[list(k), v] for k, v in bias.items()]
        return record


def _ids(rng: random.Random, ctx: Context, count: int) -> list[int]:
    pool = list(ctx.common_ids) or list(range(ctx.vocab_size))
    return [rng.choice(pool) if rng.random() < 0.8 else rng.randrange(ctx.vocab_size) for _ in range(count)]


def _option(key: str, *values: Any) -> Callable[[random.Random, Context, Case], None]:
    """A family that sets the generation option ``key`` to one of ``values`` (drawn only when there are several)."""

    def draw(rng: random.Random, ctx: Context, case: Case) -> None:
        case.generation[key] = rng.choice(values) if len(values) > 1 else values[0]

    return draw


def _min_length(rng, ctx, case):
    key = rng.choice(["min_new_tokens", "min_length"])
    case.generation[key] = rng.randint(1, case.generation["max_new_tokens"] + 2) + (4 if key == "min_length" else 0)


def _stop_strings(rng, ctx, case):
    case.generation["stop_strings"] = rng.sample(list(ctx.stop_texts), rng.randint(1, 2))


def _bad_words(rng, ctx, case):
    case.generation["bad_words_ids"] = [_ids(rng, ctx, rng.choice([1, 1, 2])) for _ in range(rng.randint(1, 4))]


def _eos(rng, ctx, case):
    case.generation["eos_token_id"] = list(dict.fromkeys([*ctx.eos_ids, *_ids(rng, ctx, rng.randint(1, 3))]))


def _suppress(rng, ctx, case):
    key = rng.choice(["suppress_tokens", "begin_suppress_tokens"])
    case.generation[key] = sorted(set(_ids(rng, ctx, rng.randint(1, 5))))


def _sequence_bias(rng, ctx, case):
    bias = {tuple(_ids(rng, ctx, rng.choice([1, 2]))): rng.choice([-8.0, -2.0, 2.0, 8.0]) for _ in range(3)}
    case.generation["sequence_bias"] = bias


def _forced_eos(rng, ctx, case):
    case.generation["forced_eos_token_id"] = rng.choice(ctx.eos_ids)


def _outputs(rng, ctx, case):
    case.generation["return_dict_in_generate"] = True
    case.generation["output_scores"] = rng.random() < 0.7
    case.generation["output_logits"] = rng.random() < 0.5


def _length_penalty(rng, ctx, case):
    case.generation["exponential_decay_length_penalty"] = (rng.randint(1, 8), rng.choice([1.01, 1.1, 1.5]))


def _streamer(rng, ctx, case):
    case.streamer = True


def _thresholds(rng, ctx, case):
    for name in ("draft_confidence_threshold", "draft_skip_threshold"):
        if rng.random() < 0.7:
            case.drafter[name] = rng.choice([0.0, 0.05, 0.3, 0.5, 0.9, 0.999])


def _hybrid(rng, ctx, case):
    case.drafter["prompt_lookup_num_tokens"] = rng.choice([1, 2, 4, 8, 16, 32, 64, 256])
    if rng.random() < 0.5:
        case.drafter["lookup_min_match"] = rng.randint(1, 6)
    if rng.random() < 0.3:
        case.drafter["lookup_length_factor"] = rng.choice([0.5, 1.0, 2.0, 4.0])
    if rng.random() < 0.3:
        case.drafter["lookup_fallback_min_match"] = rng.choice([0, 1, 3])


def _session(rng, ctx, case):
    case.session = {"min_match": rng.randint(1, 6)} if rng.random() < 0.5 else {}
    case.drafter.setdefault("prompt_lookup_num_tokens", rng.choice([4, 16, 32]))


def _assistant(rng, ctx, case):
    """transformers' own assisted-decoding knobs: lowering K is honoured, the rest must be refused or harmless."""
    options = [
        ("num_assistant_tokens", [1, 3, 5, 7, 20]),
        ("num_assistant_tokens_schedule", ["constant", "heuristic", "heuristic_transient"]),
        ("assistant_confidence_threshold", [0.0, 0.2, 0.4]),
    ]
    name, values = rng.choice(options)
    case.generation[name] = rng.choice(values)


def _other_modes(rng, ctx, case):
    """Modes assisted decoding cannot run (beams, contrastive search, several sequences, CFG): plain runs them, the
    drafted call must refuse them by name."""
    modes = [
        {"num_beams": 2},
        {"penalty_alpha": 0.6, "top_k": 4},
        {"num_return_sequences": 2, "do_sample": True},
        {"guidance_scale": 1.5},
        {"low_memory": True},
    ]
    mode = rng.choice(modes)
    case.generation.update(mode)
    case.sampled = case.sampled or mode.get("do_sample", False)


def _bad_drafter_option(rng, ctx, case):
    """An invalid drafter option: the drafted call must refuse it, naming it (plain never sees it)."""
    invalid = [
        ("draft_confidence_threshold", 1.5),
        ("draft_skip_threshold", -0.2),
        ("lookup_min_match", 0),
        ("lookup_length_factor", 0.0),
        ("lookup_fallback_min_match", -1),
        ("prompt_lookup_num_tokens", 10_000),
    ]
    name, value = rng.choice(invalid)
    if name != "prompt_lookup_num_tokens":
        case.drafter.setdefault("prompt_lookup_num_tokens", 8)
    case.drafter[name] = value


FAMILIES: dict[str, Callable[[random.Random, Context, Case], None]] = {
    "repetition_penalty": _option("repetition_penalty", 0.9, 1.05, 1.2, 1.5, 2.0),
    "no_repeat_ngram": _option("no_repeat_ngram_size", 1, 2, 3, 4),
    "min_length": _min_length,
    "stop_strings": _stop_strings,
    "bad_words": _bad_words,
    "eos_ids": _eos,
    "suppress_tokens": _suppress,
    "sequence_bias": _sequence_bias,
    "forced_eos": _forced_eos,
    "output_scores": _outputs,
    "static_cache": _option("cache_implementation", "static"),
    "length_penalty": _length_penalty,
    "renormalize": _option("renormalize_logits", True),
    "streamer": _streamer,
    "thresholds": _thresholds,
    "hybrid": _hybrid,
    "session": _session,
    "assistant_options": _assistant,
    "other_modes": _other_modes,
    "bad_drafter_option": _bad_drafter_option,
}
"""Each family adds its options to a case; a case draws 1-4 of them, beside its length and decoding mode."""
_RARE = {"other_modes": 0.25, "bad_drafter_option": 0.25}  # refusals are few but every kind is drawn


def draw_case(rng: random.Random, ctx: Context, index: int, max_new_tokens: int = 24, sampled: float = 0.25) -> Case:
    """Draw one case: a length (1 to ``max_new_tokens``, 1 often), greedy or sampled, and 1-4 option families
    (``stop_strings`` only where the context has stop texts: a target without a tokenizer has none)."""
    case = Case(index=index, seed=rng.randrange(2**31))
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens}: expected the longest case's length, 1 or more (e.g. 16).")
    short = max_new_tokens == 1 or rng.random() < 0.08
    case.generation["max_new_tokens"] = 1 if short else rng.randint(2, max_new_tokens)
    names = [n for n in FAMILIES if rng.random() < _RARE.get(n, 1.0) and (n != "stop_strings" or ctx.stop_texts)]
    for name in rng.sample(names, rng.randint(1, min(4, len(names)))):
        case.families.append(name)
        FAMILIES[name](rng, ctx, case)
    if rng.random() < sampled and not case.sampled:
        case.sampled = True
        case.generation["do_sample"] = True
        for name in rng.sample(_SAMPLING, rng.randint(1, 3)):
            case.generation[name] = {  # every value is drawn for each name: the seeded cases depend on it
                "temperature": rng.choice([0.3, 0.7, 1.0, 1.5]),
                "top_k": rng.choice([1, 5, 50]),
                "top_p": rng.choice([0.5, 0.9, 1.0]),
                "min_p": rng.choice([0.02, 0.1]),
                "typical_p": rng.choice([0.5, 0.95]),
                "epsilon_cutoff": 3e-4,
                "eta_cutoff": 1e-3,
            }[name]
        case.families.append("sampling")
    elif not case.sampled:
        case.generation["do_sample"] = False
    return case
