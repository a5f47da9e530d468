"""`scripts/drafter_shapes.sh`: the one place the training scripts take the shipped drafter's shape from, checked
against the shipped drafter's config, and each capacity variant through `dlite-hf train`'s own parser."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHAPES = ROOT / "scripts" / "drafter_shapes.sh"
SHIPPED = ROOT / "drafters" / "dlite-smollm2-135m" / "config.json"


def _flags(*names: str) -> list[str]:
    """The flags of the named arrays, in order, as bash expands them after sourcing the file."""
    expand = " ".join(f'"${{{name}[@]}}"' for name in names)
    script = f'source "{SHAPES}"; printf "%s\\n" {expand}'
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    return result.stdout.split()


def _parsed(*names: str):
    from dlite_hf.commands.train import build_train_parser

    parser = build_train_parser()
    script, _ = parser.parse_args_into_dataclasses(args=[*_flags(*names), "--output_dir", "unused"])
    return script


def test_the_shipped_shape_is_the_shipped_drafters():
    config = json.loads(SHIPPED.read_text())
    script = _parsed("SHIPPED_SHAPE")
    built = {
        "hidden_size": script.drafter_hidden_size,
        "num_attention_heads": script.drafter_heads,
        "num_key_value_heads": script.drafter_kv_heads,
        "intermediate_size": script.drafter_intermediate_size,
        "num_hidden_layers": script.drafter_layers,
        "head_rank": script.head_rank,
        "num_draft_tokens": script.num_draft_tokens,
        "draft_vocab_size": script.draft_vocab_size,
    }
    assert built == {name: config[name] for name in built}
    assert script.num_tapped_layers == len(config["target_layer_ids"])


@pytest.mark.parametrize(
    ("variant", "changed"),
    [
        (
            "WIDTH_576",
            {"drafter_hidden_size": 576, "drafter_heads": 9, "drafter_kv_heads": 3, "drafter_intermediate_size": 1536},
        ),
        ("LAYERS_7", {"drafter_layers": 7}),
        ("TAPS_12", {"num_tapped_layers": 12}),
    ],
)
def test_a_variant_after_the_shipped_shape_changes_only_what_it_names(variant, changed):
    base, varied = vars(_parsed("SHIPPED_SHAPE")), vars(_parsed("SHIPPED_SHAPE", variant))
    assert {name: value for name, value in varied.items() if base[name] != value} == changed
