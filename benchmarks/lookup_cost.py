"""What one round of retrieval costs against the context length: the hybrid's suffix index beside transformers'
prompt lookup (which re-scans the whole context with `unfold` every round).

The context is real text: Python standard-library source files tokenized with the target's tokenizer, concatenated
to each length. A round commits a few tokens (taken from further in the same text, so matches exist) and asks for
a draft of up to 16 tokens: the index appends the committed tokens and looks up; prompt lookup runs its
`get_candidates` on the whole sequence. Median of `--rounds` rounds per length, 1 thread.

    .venv/bin/python benchmarks/lookup_cost.py --lengths 1024,4096,16384,65536 \\
        --out benchmarks/results/lookup_cost.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import sysconfig
import time
from pathlib import Path


def _corpus_ids(tokenizer, tokens: int) -> list[int]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    ids: list[int] = []
    for path in sorted(stdlib.glob("*.py")):
        ids += tokenizer(path.read_text(encoding="utf-8", errors="replace"), add_special_tokens=False)["input_ids"]
        if len(ids) >= tokens:
            return ids[:tokens]
    raise SystemExit(f"the standard library has fewer than {tokens} tokens of source here")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="smollm2-135m", help="whose tokenizer")
    parser.add_argument("--lengths", default="1024,4096,16384,65536")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--commit", type=int, default=3, help="tokens committed per round")
    parser.add_argument("--lookup-tokens", type=int, default=16)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    import torch
    from transformers import AutoTokenizer
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    from dlite_hf.assets import resolve_model
    from dlite_hf.modeling.suffix_index import SuffixIndex

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(args.target))
    lengths = [int(x) for x in args.lengths.split(",")]
    extra = args.rounds * args.commit
    corpus = _corpus_ids(tokenizer, max(lengths) + extra)
    rows = []
    for length in lengths:
        # the committed tokens come from an earlier part of the text, so they repeat it (lookups find matches)
        context, commits = corpus[:length], corpus[length // 2 : length // 2 + extra]
        index = SuffixIndex()
        started = time.perf_counter()
        index.start_stream(context)
        build_s = time.perf_counter() - started
        ours, matched = [], 0
        for r in range(args.rounds):
            started = time.perf_counter()
            index.append(commits[r * args.commit : (r + 1) * args.commit])
            match = index.lookup(args.lookup_tokens)
            ours.append(1e6 * (time.perf_counter() - started))
            matched += match.length > 0
        lookup = PromptLookupCandidateGenerator(
            num_output_tokens=args.lookup_tokens, max_matching_ngram_size=2, max_length=10**9
        )
        theirs = []
        sequence = torch.tensor([context])
        for r in range(args.rounds):
            sequence = torch.cat([sequence, torch.tensor([commits[r * args.commit : (r + 1) * args.commit]])], 1)
            started = time.perf_counter()
            lookup.get_candidates(sequence)
            theirs.append(1e6 * (time.perf_counter() - started))
        rows.append(
            {
                "context_tokens": length,
                "suffix_index_us_per_round": statistics.median(ours),
                "prompt_lookup_us_per_round": statistics.median(theirs),
                "index_build_ms": 1000 * build_s,
                "index_states": index.num_states,
                "rounds_with_a_match": matched,
            }
        )
        print(
            f"{length:>6} tokens: suffix index {rows[-1]['suffix_index_us_per_round']:.1f} us/round "
            f"(build {rows[-1]['index_build_ms']:.0f} ms once), prompt lookup "
            f"{rows[-1]['prompt_lookup_us_per_round']:.1f} us/round",
            flush=True,
        )
    result = {
        "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "threads": 1,
        "commit_per_round": args.commit,
        "lookup_tokens": args.lookup_tokens,
        "rows": rows,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
