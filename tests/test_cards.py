"""Model cards: every card in hub_cards/ validates, the paper cards match their generator and the paper's figures,
and `dlite-hf card` renders a valid, traceable card from a checkpoint and a bench result."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from huggingface_hub import ModelCard
from tiny_models import make_drafter

from dlite_hf import DLiteConfig
from dlite_hf.cards import PAPER_LABEL, REQUIRED_SECTIONS, check_card, numbers_in, render_model_card, results_tables
from dlite_hf.cli import main as cli_main
from dlite_hf.commands.card import bench_rows, read_bench_result

REPO = Path(__file__).resolve().parents[1]
HUB_CARDS = sorted((REPO / "hub_cards").glob("*.md"))


def _load_paper_card_generator():
    spec = importlib.util.spec_from_file_location("render_paper_cards", REPO / "hub_cards" / "render_paper_cards.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------------------------------------------
# The cards in hub_cards/
# --------------------------------------------------------------------------------------------------------------


def test_hub_cards_exist():
    names = {path.name for path in HUB_CARDS}
    assert {"dlite-qwen3-4b.md", "dlite-qwen3-8b.md"} <= names


@pytest.mark.parametrize("path", HUB_CARDS, ids=lambda p: p.name)
def test_hub_card_is_valid(path):
    text = path.read_text(encoding="utf-8")
    data = ModelCard(text).data.to_dict()
    assert data["library_name"] == "transformers"
    assert data["pipeline_tag"] == "text-generation"
    assert data["base_model"] and data["license"]
    assert {"speculative-decoding", "dlite"} <= set(data["tags"])
    for heading in REQUIRED_SECTIONS:
        assert heading + "\n" in text, f"{path.name} lacks {heading}"
    assert 'AutoModel.from_pretrained("' in text and "assistant_model=drafter" in text
    tables = results_tables(text)
    assert tables, f"{path.name} has no results table"
    for label, _, _ in tables:
        assert PAPER_LABEL in label or "Source: `" in label, f"unlabelled results table in {path.name}"
    # every number is labelled as the paper's or traceable to the bench file the card names
    assert check_card(text) == []


@pytest.mark.parametrize("size", ["4b", "8b"])
def test_paper_cards_are_rendered_from_the_generator(size):
    generator = _load_paper_card_generator()
    path = REPO / "hub_cards" / f"dlite-qwen3-{size}.md"
    assert path.read_text(encoding="utf-8") == generator.render(size), (
        f"{path.name} is stale: run .venv/bin/python hub_cards/render_paper_cards.py"
    )
    config = generator.paper_config(size)
    tapped, rank, hidden = {"4b": (12, 320, 2560), "8b": (14, 512, 4096)}[size]
    assert len(config.target_layer_ids) == tapped and config.head_rank == rank
    assert config.num_draft_tokens == 7 and config.num_hidden_layers == 5 and config.history_window == 0
    assert (config.num_target_layers, config.target_hidden_size, config.vocab_size) == (36, hidden, 151936)
    text = path.read_text(encoding="utf-8")
    data = ModelCard(text).data.to_dict()
    assert data["base_model"] == f"Qwen/Qwen3-{size.upper()}"
    assert f"SJTU-DAI-Sys/dlite-qwen3-{size}" in text
    assert f"rank R = {rank}" in text and f"hidden {hidden}, vocab 151936" in text
    assert "5 bidirectional qwen3 layers" in text and "| draft tokens per round (K) | 7 |" in text
    assert "learning rate 4e-4" in text and "0.1 x cross-entropy" in text and "8 epochs" in text
    assert PAPER_LABEL in text and "dlite-hf has not reproduced them" in text


def test_paper_figures_are_the_papers():
    """Every figure of a paper-labelled results table is one of the paper's (docs/paper-results.md)."""
    paper = (REPO / "docs" / "paper-results.md").read_text(encoding="utf-8").splitlines()
    allowed = {number for line in paper if line.startswith("|") for number in numbers_in(line)}
    quoted = 0
    for path in HUB_CARDS:
        for label, _, rows in results_tables(path.read_text(encoding="utf-8")):
            if PAPER_LABEL not in label:
                continue
            for row in rows:
                line = " | ".join(row)
                for number in numbers_in(line):
                    assert number in allowed, f"{path.name}: {number} in {line!r} is not a figure of the paper"
                    quoted += 1
    assert quoted, "no card quotes the paper: the check above checked nothing"


# --------------------------------------------------------------------------------------------------------------
# dlite-hf card
# --------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    from transformers import LlamaConfig

    target_config = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        architectures=["LlamaForCausalLM"],
    )
    drafter = make_drafter(
        target_config,
        num_target_layers_tapped=2,
        target_name_or_path="smollm2-135m",
        num_hidden_layers=1,
        head_rank=8,
        intermediate_size=None,
    )
    folder = tmp_path_factory.mktemp("ckpt") / "drafter"
    drafter.save_pretrained(folder)
    record = {"stage": "stable", "epochs": 6, "learning_rate": 0.001, "draft_vocab_resized": {"from": 64, "to": 32}}
    (folder / "dlite_training.json").write_text(json.dumps(record))
    return folder


BENCH_DOCUMENT = {
    "schema_version": 1,
    "meta": {
        "command": "dlite-hf bench --target smollm2-135m --max-new-tokens 128 --threads 1",
        "threads": 1,
        "machine": {"cpu": "Intel(R) Xeon(R) Processor", "cpu_count": 2},
    },
    "records": [{"workload": "code", "method": "dlite", "prompt_id": "humaneval/1", "tau": 2.5, "speedup": None}],
    "summary": [
        {
            "workload": "code",
            "method": "plain",
            "prompts": 4,
            "mean_tau": 1.0,
            "tok_s": 7.4183,
            "speedup": 1.0,
            "lossless": True,
        },
        {
            "workload": "code",
            "method": "dlite",
            "prompts": 4,
            "mean_tau": 2.31894,
            "tok_s": 11.0571,
            "speedup": 1.49052,
            "lossless": True,
        },
        {
            "workload": "long-1024",
            "method": "dlite",
            "prompts": 4,
            "mean_tau": 1.9012,
            "tok_s": 5.5021,
            "speedup": 1.2249,
            "lossless": True,
        },
    ],
}


def test_card_command_renders_a_traceable_card(tiny_checkpoint, tmp_path):
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(BENCH_DOCUMENT, indent=1))
    out = tmp_path / "README.md"
    argv = ["card", "--checkpoint", str(tiny_checkpoint), "--bench-result", str(bench), "--repo-id", "org/dlite-x"]
    assert cli_main([*argv, "--out", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    data = ModelCard(text).data.to_dict()
    assert data["base_model"] == "HuggingFaceTB/SmolLM2-135M-Instruct"  # registry name mapped to its Hub id
    assert data["library_name"] == "transformers"
    assert 'AutoModel.from_pretrained("org/dlite-x")' in text
    assert f"Source: `{bench}`" in text and BENCH_DOCUMENT["meta"]["command"] in text
    assert "on Intel(R) Xeon(R) Processor, 2 cores, 1 thread(s)" in text  # speedups are one CPU's ratios
    assert "| code | dlite | 4 | 2.32 | 11.06 | 1.49x | yes |" in text
    assert "| long-1024 | dlite | 4 | 1.90 | 5.50 | 1.22x | yes |" in text
    assert "| stage | stable |" in text  # from dlite_training.json
    assert "| draft_vocab_resized | from: 64, to: 32 |" in text  # a nested record reads as one cell
    assert check_card(text) == []
    # a number that is not in the bench file (here: edited by hand) is caught
    edited = text.replace("| 2.32 |", "| 2.42 |")
    assert any("2.42" in problem for problem in check_card(edited))
    # ... and so is a number of another workload/method row, even though it appears elsewhere in the file
    swapped = text.replace("| code | dlite | 4 | 2.32 |", "| code | dlite | 4 | 1.90 |")
    assert any("1.90" in problem for problem in check_card(swapped))


def test_card_command_accepts_a_simple_row_list(tiny_checkpoint, tmp_path, capsys):
    rows = [{"workload": "chat", "method": "dlite", "tau": 1.8731, "speedup": 1.1302}]
    bench = tmp_path / "rows.json"
    bench.write_text(json.dumps(rows))
    assert cli_main(["card", "--checkpoint", str(tiny_checkpoint), "--bench-result", str(bench), "--out", "-"]) == 0
    text = capsys.readouterr().out
    assert "| chat | dlite | 1.87 | 1.13x |" in text and check_card(text) == []
    assert bench_rows(read_bench_result({"rows": rows})) == bench_rows(read_bench_result(rows))
    with pytest.raises(ValueError, match="workload, method, tau"):
        read_bench_result([{"workload": "chat", "method": "dlite"}])
    with pytest.raises(ValueError, match="summary"):
        read_bench_result({"unexpected": 1})


def test_check_card_reports_problems():
    text = (REPO / "hub_cards" / "dlite-qwen3-4b.md").read_text(encoding="utf-8")
    unlabelled = text.replace("Figures reported in the DLite paper (not measured by dlite-hf).", "Some numbers.")
    assert any("neither labelled" in p for p in check_card(unlabelled))
    assert any("## Limits" in p for p in check_card(text.replace("## Limits", "## Caveats")))
    assert any("library_name" in p for p in check_card(text.replace("library_name: transformers", "library_name: x")))
    missing = text.replace("Figures reported in the DLite paper (not measured by dlite-hf).", "Source: `nope.json`.")
    assert any("does not exist" in p for p in check_card(missing))


def test_card_check_command(capsys):
    assert cli_main(["card", "--check", *map(str, HUB_CARDS)]) == 0
    assert capsys.readouterr().out.count(": ok") == len(HUB_CARDS)


def test_card_states_the_adaptive_drafting_setting():
    off = render_model_card(DLiteConfig(num_target_layers=4))
    assert "| adaptive drafting | off: K drafts every round (as in the paper) |" in off
    on = render_model_card(DLiteConfig(num_target_layers=4, draft_confidence_threshold=0.1, draft_skip_threshold=0.5))
    assert "joint probability falls below 0.1" in on and "first draft has probability below 0.5" in on
    assert "`draft_skip_threshold=0.0`" in on  # how to turn the CPU-tuned skip off
    config = DLiteConfig(num_target_layers=4, draft_confidence_threshold=0.1, draft_lengths=[3, 7])
    assert "an early stop ends at 3, 7 drafts (or K)" in render_model_card(config)


@pytest.mark.parametrize(("window", "past"), [(0, None), (-1, "every past position"), (16, "the last 16 positions")])
def test_card_describes_history_free_and_history_aware_checkpoints(window, past):
    card = render_model_card(DLiteConfig(num_target_layers=4, history_window=window))
    if window == 0:
        assert "history-free speculative decoding" in card and "keeps no KV cache and no history" in card
        assert "history-aware" not in card
    else:
        assert "**history-aware** DLite drafter" in card and f"(`history_window={window}`)" in card
        assert past in card and "history-free speculative decoding" not in card
    assert "Output is token-identical to the target's greedy decoding" in card


def test_card_counts_parameters_not_the_draft_vocabulary_buffer(tmp_path):
    from transformers import LlamaConfig

    from dlite_hf.commands.card import _num_parameters

    target_config = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    model = make_drafter(
        target_config,
        num_target_layers_tapped=2,
        num_hidden_layers=1,
        head_rank=8,
        intermediate_size=None,
        draft_vocab_size=40,
    )
    model.save_pretrained(tmp_path)
    assert _num_parameters(tmp_path) == sum(p.numel() for p in model.parameters())


def test_card_usage_shows_the_decoding_measured_fastest(tiny_checkpoint, tmp_path):
    from dlite_hf.commands.card import fastest_decoding
    from dlite_hf.modeling.decoding_options import DEFAULT_LOOKUP_TOKENS

    def document(hybrid_speedup):
        rows = [
            {"workload": "all", "method": "plain", "mean_tau": 1.0, "speedup": 1.0},
            {"workload": "all", "method": "dlite", "mean_tau": 1.8, "speedup": 1.1},
            {"workload": "all", "method": "hybrid", "mean_tau": 2.4, "speedup": hybrid_speedup},
        ]
        return {"meta": {"command": "dlite-hf bench"}, "summary": rows}

    fastest = [fastest_decoding(read_bench_result(document(speedup))) for speedup in (1.3, 1.0)]
    assert fastest == ["hybrid", "dlite"]
    assert fastest_decoding(read_bench_result(BENCH_DOCUMENT)) is None  # no hybrid: the card keeps the plain example
    hybrid_call = f"prompt_lookup_num_tokens={DEFAULT_LOOKUP_TOKENS}"
    for speedup, shown in ((1.3, True), (1.0, False)):
        bench = tmp_path / f"bench-{speedup}.json"
        bench.write_text(json.dumps(document(speedup)))
        out = tmp_path / f"card-{speedup}.md"
        assert (
            cli_main(["card", "--checkpoint", str(tiny_checkpoint), "--bench-result", str(bench), "--out", str(out)])
            == 0
        )
        assert (hybrid_call in out.read_text(encoding="utf-8")) is shown


def test_the_usage_example_loads_the_models_in_the_measured_mode():
    from dlite_hf.cards import _usage_load

    fast = _usage_load("org/target", "org/drafter", "bfloat16", "packed_gqa")
    assert "dtype=torch.bfloat16, attn_implementation=dlite_hf.attention.register()" in fast
    assert 'AutoModel.from_pretrained("org/drafter", dtype=torch.bfloat16)' in fast and fast.startswith("import torch")
    assert "elsewhere torch.float32 is faster" in fast  # bfloat16 is the fast mode only where the CPU computes it
    plain = _usage_load("org/target", "org/drafter", None, None)
    assert "torch" not in plain and 'from_pretrained("org/target")' in plain and "trust_remote_code=True" in plain
    with pytest.raises(ValueError, match="dtype='int8' is invalid"):
        _usage_load("org/target", "org/drafter", "int8", None)


def test_card_without_out_refuses_to_write_through_a_readme_link(tiny_checkpoint, tmp_path):
    """The shipped drafter's README.md is a link into hub_cards/: `card` without --out must not overwrite the
    tracked card behind it; with --out it writes where it is told."""
    import shutil

    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(BENCH_DOCUMENT, indent=1))
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(tiny_checkpoint, checkpoint)
    tracked = tmp_path / "hub_cards" / "card.md"
    tracked.parent.mkdir()
    tracked.write_text("the tracked card\n")
    (checkpoint / "README.md").unlink(missing_ok=True)
    (checkpoint / "README.md").symlink_to(tracked)
    argv = ["card", "--checkpoint", str(checkpoint), "--bench-result", str(bench), "--repo-id", "org/dlite-x"]
    with pytest.raises(SystemExit, match=r"README.md is a link to .*card.md; writing the card there would overwrite"):
        cli_main(argv)
    assert tracked.read_text() == "the tracked card\n"
    assert cli_main([*argv, "--out", str(tracked)]) == 0 and "DLite drafter" in tracked.read_text()
