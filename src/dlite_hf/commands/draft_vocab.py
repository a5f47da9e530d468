"""`dlite-hf draft-vocab`: give a trained drafter another draft vocabulary, chosen from regenerated data.

    dlite-hf draft-vocab --drafter drafters/dlite-smollm2-135m --data runs/regen.jsonl --size 4096 --out DIR

A drafter drafts among `config.draft_vocab_size` rows of the target's lm_head, which its weights do not depend on.
A smaller vocabulary makes rounds cheaper where reading that slice dominates (a CPU), but its dropped tokens can no
longer be drafted (outputs stay the target's; acceptance can fall): the command reports the coverage of the data's
response tokens before and after (docs/design.md, "Draft vocabulary").
"""

from __future__ import annotations

import argparse

from .common import add_command, exit_on_error


def cmd_draft_vocab(args: argparse.Namespace) -> int:
    from ..draft_vocab import resize_draft_vocab

    with exit_on_error("dlite-hf draft-vocab", ValueError):
        report = resize_draft_vocab(args.drafter, args.data, args.size, args.out, max_length=args.max_length)
    print(
        f"{args.out}: draft vocabulary {report['from'] or 'full'} -> {report['to']} tokens; coverage of the "
        f"{report['response_tokens']:,} response tokens of {args.data}: {report['coverage_before']:.2%} -> "
        f"{report['coverage_after']:.2%}"
    )
    return 0


def add_draft_vocab_parser(sub: argparse._SubParsersAction) -> None:
    summary = "Give a trained drafter another draft vocabulary (e.g. smaller: cheaper rounds on a CPU)."
    parser = add_command(sub, "draft-vocab", summary, cmd_draft_vocab, __doc__)
    add = parser.add_argument
    add("--drafter", required=True, help="drafter folder")
    add("--data", required=True, help="`dlite-hf regenerate` rows of the drafter's target")
    add("--size", required=True, type=int, help="tokens in the new draft vocabulary")
    add("--out", required=True, help="new drafter folder")
    add("--max-length", type=int, default=1024, help="tokens read per row (as `dlite-hf train --max_length`)")


def cmd_interpolate(args: argparse.Namespace) -> int:
    from ..derived_drafters import interpolate_drafters

    with exit_on_error("dlite-hf interpolate", ValueError):
        interpolate_drafters(args.base, args.tuned, args.alpha, args.out)
    print(
        f"{args.out}: {1 - args.alpha:g} x {args.base} + {args.alpha:g} x {args.tuned} (vocabulary of the tuned one)"
    )
    return 0


def add_interpolate_parser(sub: argparse._SubParsersAction) -> None:
    summary = "Average a fine-tuned drafter's weights with the drafter it started from (WiSE-FT)."
    doc = """(1 - alpha) * base + alpha * tuned, every weight; the tuned drafter's config and draft vocabulary.
Keeps much of the base's skill on what the fine-tuning data lacked."""
    parser = add_command(sub, "interpolate", summary, cmd_interpolate, doc)
    parser.add_argument("--base", required=True, help="the drafter the fine-tuning started from")
    parser.add_argument("--tuned", required=True, help="the fine-tuned drafter")
    parser.add_argument("--alpha", required=True, type=float, help="weight of the tuned drafter, in [0, 1]")
    parser.add_argument("--out", required=True, help="new drafter folder")
