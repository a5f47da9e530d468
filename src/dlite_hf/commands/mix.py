"""`dlite-hf mix` (build the broad training mix, tabulate or rebalance training rows) and `dlite-hf label-text`.

    dlite-hf mix build --out data/mix --prompts-per-domain 500 --texts-per-domain 500
    dlite-hf mix build --out data/mix2 --prompts-per-domain 1000 --texts-per-domain 500 --extend data/mix
    dlite-hf regenerate --prompts data/mix/prompts.jsonl --out data/mix/regen.jsonl --dtype bfloat16
    dlite-hf label-text --texts data/mix/texts.jsonl --out data/mix/text_rows.jsonl
    dlite-hf mix table data/mix/regen.jsonl data/mix/text_rows.jsonl
    dlite-hf mix rebalance data/mix/regen.jsonl --power 0.5 --out data/mix/rebalanced.jsonl
    dlite-hf train --stage stable --data data/mix/regen.jsonl,data/mix/text_rows.jsonl ...

See `dlite_hf.data.domains` for the domains and their splits, `dlite_hf.data.sources` for their sources.

`rebalance` repeats whole rows so that each domain's share of response tokens follows tokens ** power (temperature
sampling over domains; the largest domain once, none dropped), so a feature cache filled for the rows serves the
result too; `--order-after DONE` instead orders the rows not in DONE so that every prefix is balanced with it.
"""

from __future__ import annotations

import argparse
import json

from ..defaults import DEFAULT_TARGET
from .common import add_command, exit_on_error, positive_int


def cmd_mix(args: argparse.Namespace) -> int:
    from ..data import mix as broad_mix
    from ..jsonl import read_jsonl

    with exit_on_error(f"dlite-hf mix {args.action}", ValueError, FileNotFoundError):
        if args.action == "build":
            if not args.out:
                raise ValueError("mix build needs --out DIR (where prompts.jsonl, texts.jsonl and mix.json go).")
            domains = [d for d in (args.domains or "").split(",") if d]
            weights = _parse_weights(args.weights)
            summary = broad_mix.build_mix(
                args.out, args.prompts_per_domain, args.texts_per_domain, args.seed, domains, weights, args.extend
            )
            print(json.dumps(summary, indent=2))
            return 0
        if not args.rows:
            raise ValueError(f"mix {args.action} needs one or more row files (written by regenerate or label-text).")
        rows = [row for path in args.rows for row in read_jsonl(path)]
        if args.action == "table":
            print(broad_mix.data_table(rows))
            return 0
        if not args.out:
            raise ValueError("mix rebalance needs --out FILE (the rows to write).")
        done = read_jsonl(args.order_after) if args.order_after else None
        print(broad_mix.rebalance_rows(rows, args.out, args.power, args.seed, done))
    return 0


def _parse_weights(spec: str | None) -> dict[str, float]:
    weights: dict[str, float] = {}
    for item in filter(None, (spec or "").split(",")):
        name, _, value = item.partition("=")
        try:
            weights[name.strip()] = float(value)
        except ValueError:
            raise ValueError(
                f"--weights item {item!r}: expected DOMAIN=FACTOR items separated by commas, e.g. code=3,math=0.5."
            ) from None
    return weights


def cmd_label_text(args: argparse.Namespace) -> int:
    from transformers import AutoTokenizer

    from ..assets import resolve_model
    from ..data.regenerate import label_text
    from ..jsonl import read_jsonl

    with exit_on_error("dlite-hf label-text", ValueError, FileNotFoundError):
        items = read_jsonl(args.texts)[: args.limit]
        tokenizer = AutoTokenizer.from_pretrained(resolve_model(args.target))
        result = label_text(tokenizer, items, args.out, max_tokens=args.max_tokens)
    print(json.dumps(result))
    return 0


def add_mix_parsers(sub: argparse._SubParsersAction) -> None:
    summary = "Build the broad training mix (prompts and texts, train splits only) or tabulate training rows."
    mix = add_command(sub, "mix", summary, cmd_mix, __doc__)
    mix.add_argument("action", choices=["build", "table", "rebalance"])
    mix.add_argument("rows", nargs="*", help="table, rebalance: row files written by regenerate / label-text")
    mix.add_argument("--out", default=None, help="build: output folder; rebalance: the rows file to write")
    mix.add_argument("--prompts-per-domain", type=int, default=500, help="build: prompts sampled per prompt domain")
    mix.add_argument("--texts-per-domain", type=int, default=500, help="build: items sampled per text domain")
    mix.add_argument("--domains", default=None, help="build: comma-separated domains (default: all)")
    mix.add_argument("--weights", help="build: per-domain factors on the caps, e.g. code=3,coding_agent=2")
    mix.add_argument(
        "--extend", metavar="MIX", help="build: keep this earlier mix's items first and top each domain up to its cap"
    )
    mix.add_argument("--seed", type=int, default=0)
    mix.add_argument("--power", type=float, default=0.5, help="rebalance: shares follow tokens ** power (0 to 1)")
    mix.add_argument("--order-after", metavar="DONE", help="rebalance: order the rows not in DONE (a rows file)")

    summary = "Turn request + reference-reply items into training rows labelled by the target in training."
    text = add_command(sub, "label-text", summary, cmd_label_text, __doc__)
    text.add_argument("--target", default=DEFAULT_TARGET, help="the target whose tokenizer and template are used")
    text.add_argument("--texts", required=True, help="JSONL of items whose messages end with the assistant's reply")
    text.add_argument("--out", required=True, help="rows JSONL (appended; resumes by id)")
    text.add_argument("--max-tokens", type=int, default=1024, help="each row is cut to this many tokens")
    text.add_argument("--limit", type=positive_int("--limit", "a positive number of items (leave it out for all)"))
