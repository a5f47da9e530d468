"""Does the drafter's sequential head earn anything? Probe it by ablation at inference, over fixed greedy texts.

The head (a gated low-rank recurrence, ``DLiteSequentialHead``) is what lets draft position i depend on the draft
tokens before it. Each variant below changes only the head, and is replayed over the cached greedy texts of
``benchmarks/ood_tau.py`` (exact greedy tau, K drafts every round):

* ``full``: the drafter as trained;
* ``no_tokens``: the head's token input is zeroed, so it sees no in-block token (its recurrence over the block's
  backbone states stays);
* ``no_head``: the head removed (the backbone output of each position is projected directly);
* the ratio ``|up(s_i)| / |h_i|``: how large the head's contribution is against the backbone output it is added to.

If ``no_tokens`` and ``no_head`` lose no tau, the head is unused; the size of the loss is what it earns.

    .venv/bin/python benchmarks/head_probe.py --texts runs/ood/texts.jsonl --drafter drafters/dlite-smollm2-135m \\
        --out benchmarks/results/smollm2-135m-head-probe.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="smollm2-135m")
    parser.add_argument("--drafter", default=None, help="default: the shipped drafter")
    parser.add_argument("--texts", required=True, help="greedy texts written by benchmarks/ood_tau.py")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    import torch

    from dlite_hf import DLiteForSpeculation
    from dlite_hf.assets import open_target
    from dlite_hf.bench.replay import replay_tau, summarise
    from dlite_hf.data.prompts import OUT_OF_DOMAIN_WORKLOADS
    from dlite_hf.defaults import default_drafter_dir
    from dlite_hf.training.features import target_features

    torch.set_num_threads(args.threads)
    texts = [json.loads(line) for line in Path(args.texts).read_text().splitlines() if line.strip()]
    target, _, _ = open_target(args.target, dtype="float32", attention="sdpa")
    folder = args.drafter or str(default_drafter_dir())
    drafter = DLiteForSpeculation.from_pretrained(folder, dtype=torch.float32).eval().bind_target(target)
    head = drafter.head
    if head is None:
        raise SystemExit(f"{folder} has no sequential head (config.use_sequential_head=False): nothing to probe.")
    original_step = head.step
    ratios: list[float] = []

    def no_tokens(block_state, prev_token_embeds, state):
        return original_step(block_state, torch.zeros_like(prev_token_embeds), state)

    def measured(block_state, prev_token_embeds, state):
        out, new_state = original_step(block_state, prev_token_embeds, state)
        ratios.append(float((out - block_state).norm(dim=-1).mean() / block_state.norm(dim=-1).mean()))
        return out, new_state

    variants = {"full": measured, "no_tokens": no_tokens, "no_head": None}
    result = {"target": args.target, "drafter": folder, "texts": args.texts, "variants": {}}
    with torch.no_grad():
        states = [
            target_features(target, torch.tensor([t["tokens"]]), list(drafter.config.target_layer_ids))[0]
            for t in texts
        ]
        for name, step in variants.items():
            drafter.head = head if step is not None else None
            if step is not None:
                head.step = step
            rows = []
            for text, state in zip(texts, states):
                new, forwards, accepted = replay_tau(drafter, state, text["tokens"], text["prompt_length"])
                rows.append({"id": text["id"], "workload": text["workload"], "new_tokens": new, "forwards": forwards})
            summary = summarise(rows, out_of_domain=OUT_OF_DOMAIN_WORKLOADS)
            result["variants"][name] = summary
            print(f"{name}: mean tau {summary['mean_tau']:.3f} (OOD {summary['mean_tau_ood']:.3f}, in-domain "
                  f"{summary['mean_tau_in_domain']:.3f})", flush=True)  # fmt: skip
        head.step = original_step
        drafter.head = head
    result["head_to_backbone_norm_ratio"] = sum(ratios) / len(ratios)
    print(f"|up(s_i)| / |h_i| = {result['head_to_backbone_norm_ratio']:.3f} (mean over {len(ratios)} head steps)")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
