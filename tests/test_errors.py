"""Misuse fails loudly, with a message that says what was expected, what was received and how to fix it."""

from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors.torch import load_file, save_file
from tiny_models import make_drafter, make_tiny_target
from transformers import AutoModel, Qwen3Config, Qwen3ForCausalLM
from transformers.generation.utils import GenerationMixin

from dlite_hf import DLiteForSpeculation
from dlite_hf.modeling import integration
from dlite_hf.modeling.integration import install_generate_hook


def _hook_problem(method):
    return integration._signature_problem(
        method, integration._REQUIRED_PARAMETERS[integration._HOOKED_METHOD]
    )

FIX_HINT = "A drafter only works with the target it was trained on: load the matching drafter"


@pytest.fixture(scope="module")
def pair():
    target = make_tiny_target("qwen3", seed=3)
    return target, make_drafter(target, seed=4)


def _prompt(vocab: int = 128, batch: int = 1, length: int = 5) -> torch.Tensor:
    return torch.randint(1, vocab, (batch, length), generator=torch.Generator().manual_seed(0))


def _target_with_hidden(hidden: int):
    config = Qwen3Config(
        vocab_size=128,
        hidden_size=hidden,
        intermediate_size=96,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=12,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).eval()
    model.generation_config.eos_token_id = None
    return model


# ---------------------------------------------------------------------------------------------------------------------
# wrong target
# ---------------------------------------------------------------------------------------------------------------------

MISMATCHES = {
    "layers": (lambda: make_tiny_target("qwen3", num_layers=6), ["6 layers", "4-layer target", "[0, 2, 3]"]),
    "hidden": (lambda: _target_with_hidden(48), ["hidden size 48 (expected 64)"]),
    "vocab": (lambda: make_tiny_target("qwen3", vocab_size=100), ["100 tokens (expected 128)"]),
}


@pytest.mark.parametrize("kind", list(MISMATCHES))
def test_wrong_target_via_bind_target(pair, kind):
    _, drafter = pair
    make_other, expected = MISMATCHES[kind]
    with pytest.raises(ValueError) as raised:
        drafter.bind_target(make_other())
    message = str(raised.value)
    for piece in ["trained for tiny", "but the target 'Qwen3ForCausalLM' has", *expected, FIX_HINT, "dlite-hf train"]:
        assert piece in message, (piece, message)
    assert drafter._target_embeddings is None or drafter._target_embeddings[1].out_features == 128  # not rebound


@pytest.mark.parametrize("kind", ["layers", "hidden"])
def test_wrong_target_via_generate(pair, kind):
    _, drafter = pair
    make_other, expected = MISMATCHES[kind]
    other = make_other()
    with pytest.raises(ValueError) as raised:
        other.generate(_prompt(), max_new_tokens=3, do_sample=False, assistant_model=drafter)
    message = str(raised.value)
    for piece in ["trained for tiny", *expected, FIX_HINT]:
        assert piece in message, (piece, message)


def test_wrong_vocabulary_via_generate(pair):
    _, drafter = pair
    other = make_tiny_target("qwen3", vocab_size=100)
    # transformers' own vocabulary check runs before the candidate generator and asks for two tokenizers ...
    with pytest.raises(ValueError, match="different tokenizers"):
        other.generate(_prompt(100), max_new_tokens=3, do_sample=False, assistant_model=drafter)

    class Tokenizer:  # ... a user who follows that advice must then learn the real problem: the wrong target
        pass

    with pytest.raises(ValueError) as raised:
        other.generate(
            _prompt(100),
            max_new_tokens=3,
            do_sample=False,
            assistant_model=drafter,
            tokenizer=Tokenizer(),
            assistant_tokenizer=Tokenizer(),
        )
    message = str(raised.value)
    assert "100 tokens (expected 128)" in message and FIX_HINT in message, message


def test_tokenizers_with_the_right_target_are_refused(pair):
    target, drafter = pair

    class Tokenizer:
        pass

    # same vocabulary: transformers refuses before the hook; either way the tokenizers are refused
    with pytest.raises(ValueError, match="omit `assistant_tokenizer`|Remove `assistant_tokenizer`"):
        target.generate(
            _prompt(),
            max_new_tokens=3,
            do_sample=False,
            assistant_model=drafter,
            tokenizer=Tokenizer(),
            assistant_tokenizer=Tokenizer(),
        )


# ---------------------------------------------------------------------------------------------------------------------
# generate() misuse
# ---------------------------------------------------------------------------------------------------------------------


def test_batch_larger_than_one(pair):
    target, drafter = pair
    ids = _prompt(batch=3)
    with pytest.raises(ValueError) as raised:
        target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, assistant_model=drafter)
    message = str(raised.value)
    assert "supports batch size 1" in message and "batch of 3 sequences" in message, message
    assert "once per prompt" in message, message
    assert "DLite" in message  # our message, not a generic one from transformers


def test_prompt_lookup_with_dlite_assistant_must_be_a_valid_cap(pair):
    target, drafter = pair  # prompt_lookup_num_tokens beside a DLite drafter is hybrid drafting (tests/test_hybrid.py)
    with pytest.raises(ValueError) as raised:
        target.generate(_prompt(), max_new_tokens=3, assistant_model=drafter, prompt_lookup_num_tokens=-3)
    message = str(raised.value)
    assert "prompt_lookup_num_tokens=-3" in message and "hybrid drafting" in message, message


def test_speculation_type_with_dlite_assistant(pair):
    target, drafter = pair
    with pytest.raises(ValueError, match="speculation_type='dflash'"):
        target.generate(_prompt(), max_new_tokens=3, assistant_model=drafter, speculation_type="dflash")


@pytest.mark.parametrize("call", ["forward", "draft", "embed_tokens"])
def test_unbound_drafter(pair, call):
    target, _ = pair
    drafter = make_drafter(target, seed=5)  # never bound
    context = torch.zeros(2, drafter.config.num_tapped_layers, 64)
    anchors = torch.zeros(2, dtype=torch.long)
    calls = {
        "forward": lambda: drafter(context, anchors, torch.zeros(2, 7, dtype=torch.long)),
        "draft": lambda: drafter.draft(context, anchors),
        "embed_tokens": lambda: drafter.embed_tokens(anchors),
    }
    with pytest.raises(RuntimeError) as raised:
        calls[call]()
    message = str(raised.value)
    assert "not bound to a target" in message and "drafter.bind_target(target)" in message, message
    assert "assistant_model=drafter" in message


# ---------------------------------------------------------------------------------------------------------------------
# broken checkpoints
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture
def saved(pair, tmp_path):
    _, drafter = pair
    folder = tmp_path / "drafter"
    drafter.save_pretrained(folder)
    return folder


LOADERS = {"DLiteForSpeculation": DLiteForSpeculation.from_pretrained, "AutoModel": AutoModel.from_pretrained}


@pytest.mark.parametrize("loader", list(LOADERS))
@pytest.mark.parametrize("keep", [0.0, 0.001, 0.5, 0.9999])
def test_truncated_checkpoint(saved, loader, keep):
    weights = saved / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ValueError) as raised:
        LOADERS[loader](saved)
    message = str(raised.value)
    assert "truncated or corrupt" in message and str(saved) in message, message
    assert "save the drafter again" in message


@pytest.mark.parametrize("loader", list(LOADERS))
def test_partial_checkpoint_lists_missing_keys(saved, loader):
    state = load_file(saved / "model.safetensors")
    dropped = ["head.cell.weight_hh", "norm.weight", "depth_embedding.weight"]
    save_file({k: v for k, v in state.items() if k not in dropped}, saved / "model.safetensors", {"format": "pt"})
    with pytest.raises(ValueError) as raised:
        LOADERS[loader](saved)
    message = str(raised.value)
    assert "missing_keys" in message and "partial" in message, message
    for key in dropped:
        assert key in message, (key, message)


@pytest.mark.parametrize("loader", list(LOADERS))
def test_unexpected_keys_are_an_error(saved, loader):
    state = load_file(saved / "model.safetensors")
    state["head.extra.weight"] = torch.zeros(3)
    save_file(state, saved / "model.safetensors", {"format": "pt"})
    with pytest.raises(ValueError, match=r"unexpected_keys: \['head.extra.weight'\]"):
        LOADERS[loader](saved)


@pytest.mark.parametrize("loader", list(LOADERS))
@pytest.mark.parametrize("field,value,key", [("hidden_size", 48, "norm.weight"), ("head_rank", 8, "head.up.weight")])
def test_config_that_does_not_match_the_weights(saved, loader, field, value, key):
    config = json.loads((saved / "config.json").read_text())
    config[field] = value
    (saved / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError) as raised:
        LOADERS[loader](saved)
    message = str(raised.value)
    assert "does not match its config" in message and "mismatched_keys" in message, message
    assert key in message and "config.json belongs to these weights" in message, message


@pytest.mark.parametrize(
    "override,field",
    [
        ({"num_draft_tokens": 0}, "num_draft_tokens=0"),
        ({"target_layer_ids": [0, 1, 40]}, "target_layer_ids=[0, 1, 40]"),
        ({"draft_lengths": [99]}, "draft_lengths=[99]"),
        ({"lookup_min_match": 0}, "lookup_min_match=0"),
    ],
)
def test_load_time_overrides_are_validated(saved, override, field):
    with pytest.raises(ValueError) as raised:
        DLiteForSpeculation.from_pretrained(saved, **override)
    message = str(raised.value)
    assert f"DLiteConfig.{field} is invalid" in message and "keyword overrides" in message, message


def test_intact_checkpoint_still_loads_and_returns_loading_info(saved):
    model, info = DLiteForSpeculation.from_pretrained(saved, output_loading_info=True)
    assert isinstance(model, DLiteForSpeculation)
    assert not any(v for k, v in info.items())
    assert os.path.exists(saved / "model.safetensors")


# ---------------------------------------------------------------------------------------------------------------------
# the generate() hook's guard against a changed transformers
# ---------------------------------------------------------------------------------------------------------------------


def test_hook_reads_parameters_by_name():
    original = GenerationMixin._get_candidate_generator._dlite_original
    assert _hook_problem(original) is None  # the installed transformers
    assert _hook_problem(GenerationMixin._get_candidate_generator) is None  # the wrapper keeps the signature

    def changed(self, generation_config, input_ids, inputs_tensor, logits_processor, model_kwargs, assistant_model):
        return None

    problem = _hook_problem(changed)
    assert "no parameter target_tokenizer, assistant_tokenizer" in problem and "(it has self, " in problem

    def reordered_with_a_new_option(
        self, input_ids, generation_config, logits_processor, model_kwargs, assistant_model=None,
        target_tokenizer=None, assistant_tokenizer=None, inputs_tensor=None, new_option=None,
    ):  # fmt: skip
        return None

    assert _hook_problem(reordered_with_a_new_option) is None  # other parameters may come, go and move


def test_a_changed_method_is_left_alone_with_a_warning(monkeypatch, pair):
    target, _ = pair

    def changed(self, generation_config, input_ids, logits_processor, model_kwargs, assistant_model=None):
        return None

    monkeypatch.setattr(GenerationMixin, integration._HOOKED_METHOD, changed)
    with pytest.warns(RuntimeWarning, match="cannot route generate") as caught:
        assert install_generate_hook() is False
    assert "Every other generation mode works unchanged" in str(caught[0].message)
    assert GenerationMixin._get_candidate_generator is changed  # nothing was wrapped
    ids = _prompt()
    assert target.generate(ids, max_new_tokens=3, do_sample=False).shape[1] == ids.shape[1] + 3  # plain still works


def test_a_new_optional_parameter_keeps_dlite_working(monkeypatch, pair):
    target, drafter = pair
    original = GenerationMixin._get_candidate_generator._dlite_original

    def newer(
        self, generation_config, input_ids, inputs_tensor, logits_processor, model_kwargs, assistant_model=None,
        target_tokenizer=None, assistant_tokenizer=None, new_option=None,
    ):  # fmt: skip
        return original(
            self, generation_config, input_ids, inputs_tensor, logits_processor, model_kwargs,
            assistant_model=assistant_model, target_tokenizer=target_tokenizer,
            assistant_tokenizer=assistant_tokenizer,
        )  # fmt: skip

    monkeypatch.setattr(GenerationMixin, integration._HOOKED_METHOD, newer)
    assert install_generate_hook() is True and GenerationMixin._get_candidate_generator._dlite_original is newer
    ids = _prompt()
    plain = target.generate(ids, max_new_tokens=6, do_sample=False)
    assert torch.equal(target.generate(ids, max_new_tokens=6, do_sample=False, assistant_model=drafter), plain)
    assert drafter.last_generation_stats.rounds > 0  # the DLite generator ran
    lookup = target.generate(ids, max_new_tokens=6, do_sample=False, prompt_lookup_num_tokens=3)
    assert torch.equal(lookup, plain)  # transformers' own prompt lookup still goes through the original


@pytest.mark.parametrize("option", [{"assistant_early_exit": 2}, {"use_mtp": True}])
def test_transformers_own_self_drafting_is_not_pre_empted(pair, option):
    target, drafter = pair
    with pytest.raises(ValueError) as raised:
        target.generate(_prompt(), max_new_tokens=3, assistant_model=drafter, **option)
    message = str(raised.value)
    assert f"{next(iter(option))}=" in message and "Pass one of them" in message, message


# ---------------------------------------------------------------------------------------------------------------------
# command-line values refused before any model loads
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["compare", "--num-prompts", "0"], "--num-prompts 0 is invalid"),
        (["compare", "--threads", "0"], "--threads 0 is invalid"),
        (["compare", "--max-new-tokens", "-5"], "--max-new-tokens -5 is invalid"),
        (["compare", "--lookup-tokens", "300"], "--lookup-tokens 300 is invalid"),
        (["compare", "--workloads", "chat,poetry"], "Unknown workload 'poetry'; allowed: chat, code"),
        (["compare", "--workloads", "text_news"], "Unknown workload 'text_news'"),
        (["mix", "build"], "mix build needs --out DIR"),
        (["mix", "build", "--out", "m", "--domains", "news,poetry"], "Unknown domain 'poetry'"),
        (["mix", "build", "--out", "m", "--prompts-per-domain", "-1"], "prompts_per_domain=-1"),
        (["mix", "table"], "mix table needs one or more row files"),
        (["label-text", "--texts", "missing.jsonl", "--out", "rows.jsonl"], "No JSONL file at missing.jsonl"),
        (["regenerate", "--out", "unused.jsonl", "--limit", "0"], "--limit 0 is invalid"),
        (["regenerate", "--out", "unused.jsonl", "--limit", "-1"], "--limit -1 is invalid"),
        (["regenerate", "--out", "unused.jsonl", "--threads", "0"], "--threads 0 is invalid"),
        (["bench", "--methods", ""], "No method given"),
        (["bench", "--methods", "hybrid", "--lookup-tokens", "0"], "--lookup-tokens 0 is invalid"),
        (["bench", "--methods", "hybrid", "--lookup-min-match", "0"], "--lookup-min-match 0 is invalid"),
    ],
)
def test_cli_refuses_bad_counts_before_loading_anything(argv, expected, monkeypatch, tmp_path):
    from dlite_hf import assets
    from dlite_hf.cli import main

    monkeypatch.chdir(tmp_path)

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded before the arguments were checked")

    monkeypatch.setattr(assets, "open_target", no_loading)
    with pytest.raises(SystemExit) as raised:
        main(argv)
    assert expected in str(raised.value), raised.value
    assert not list(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"id": "a", "messages": []}\n{"id": "b", \n', r"line 2: not valid JSON"),
        ('{"id": "a"}\n\n[1, 2]\n', r"line 3: got a JSON list, expected an object"),
    ],
)
def test_malformed_jsonl_names_the_file_and_line(tmp_path, text, message):
    from dlite_hf.rows import read_jsonl

    path = tmp_path / "rows.jsonl"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as raised:
        read_jsonl(path)
    assert str(path) in str(raised.value)
    with pytest.raises(FileNotFoundError, match="No JSONL file at"):
        read_jsonl(tmp_path / "missing.jsonl")


def test_compare_checks_a_prompt_file_before_loading_a_model(tmp_path, monkeypatch):
    from dlite_hf import assets
    from dlite_hf.cli import main

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded before --prompts was checked")

    monkeypatch.setattr(assets, "open_target", no_loading)
    path = tmp_path / "mine.jsonl"
    path.write_text('{"id": "a", "messages": [{"role": "user", "content": 3}]}\n')
    with pytest.raises(SystemExit, match=r"--prompts .*mine.jsonl, prompt 1: each message needs a `role`"):
        main(["compare", "--prompts", str(path)])


def _forward_hooks(model: torch.nn.Module) -> int:
    return sum(len(module._forward_hooks) for module in model.modules())


def test_a_generate_that_raises_leaves_no_hooks_on_the_target(pair):
    """The tapped-layer hooks are removed in a `finally`, not when the exception is garbage collected: three failed
    calls in a row, with their exceptions kept alive, leave the target with as many hooks as before."""
    from transformers import LogitsProcessor, LogitsProcessorList

    target, drafter = pair
    before = _forward_hooks(target)

    class Fails(LogitsProcessor):
        def __call__(self, input_ids, scores):
            raise RuntimeError("a user's logits processor failed")

    kept = []
    for _ in range(3):
        try:
            target.generate(
                _prompt(), max_new_tokens=8, do_sample=False, assistant_model=drafter,
                logits_processor=LogitsProcessorList([Fails()]),
            )  # fmt: skip
        except RuntimeError as error:
            kept.append(error)  # the traceback holds the generate() frames
        assert _forward_hooks(target) == before
    assert len(kept) == 3
    target.generate(_prompt(), max_new_tokens=4, do_sample=False, assistant_model=drafter)
    assert _forward_hooks(target) == before  # and after a call that succeeded


@pytest.mark.parametrize(
    "options, mode",
    [({"num_beams": 2}, "beam_search"), ({"num_beams": 2, "do_sample": True}, "beam_sample"),
     ({"penalty_alpha": 0.6, "top_k": 4}, "contrastive_search")],
)  # fmt: skip
def test_a_mode_that_would_ignore_the_drafter_is_refused(pair, options, mode):
    target, drafter = pair
    drafter.last_generation_stats = None
    with pytest.raises(ValueError, match=f"drafts for greedy search and sampling only.*select {mode}.*num_beams=1"):
        target.generate(_prompt(), max_new_tokens=4, assistant_model=drafter, **options)
    assert drafter.last_generation_stats is None  # nothing ran
    if "num_beams" in options:  # without the drafter: unchanged (contrastive search needs the Hub in transformers 5)
        assert target.generate(_prompt(), max_new_tokens=4, **options).shape[1] == 9


def test_compare_says_where_the_shipped_drafter_lives_when_it_is_missing(tmp_path, monkeypatch):
    """From an installed wheel the repository's drafters/ folder is absent: the error says where it looked, where
    the drafter ships and what to pass, before any model loads."""
    from dlite_hf import assets
    from dlite_hf.assets import loading
    from dlite_hf.cli import main

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded before the drafter was found")

    monkeypatch.setattr(assets, "open_target", no_loading)
    monkeypatch.setattr(loading, "drafter_search_path", lambda: [tmp_path / "drafters"])
    with pytest.raises(SystemExit, match=r"No drafter named 'dlite-smollm2-135m' in .*drafters; the trained "
                                         r"SmolLM2-135M drafter ships in the dlite-hf repository .*pass --drafter "
                                         r"PATH.*DLITE_HF_DRAFTERS"):  # fmt: skip
        main(["compare", "--workloads", "chat", "--num-prompts", "1"])
    with pytest.raises(SystemExit, match=r"elsewhere' is neither an existing folder, a Hub id \(org/name\) nor a "):
        main(["compare", "--workloads", "chat", "--num-prompts", "1", "--drafter", str(tmp_path / "elsewhere")])


def test_a_drafter_is_found_by_name_in_the_search_path(tmp_path, monkeypatch):
    """`--drafter NAME` (and the default) finds the shipped drafter in $DLITE_HF_DRAFTERS, ./drafters or the
    checkout, in that order; a folder and a Hub id work as given."""
    from dlite_hf.assets import AssetError, drafter_search_path, resolve_drafter
    from dlite_hf.defaults import DEFAULT_DRAFTER, default_drafter_dir

    mine = tmp_path / "mine"
    (mine / DEFAULT_DRAFTER).mkdir(parents=True)
    monkeypatch.setenv("DLITE_HF_DRAFTERS", str(mine))
    assert drafter_search_path()[0] == mine.resolve()
    assert resolve_drafter(DEFAULT_DRAFTER) == mine.resolve() / DEFAULT_DRAFTER
    monkeypatch.delenv("DLITE_HF_DRAFTERS")
    monkeypatch.chdir(tmp_path)  # no ./drafters here: the checkout's copy
    assert resolve_drafter(DEFAULT_DRAFTER) == default_drafter_dir().resolve()
    assert resolve_drafter(str(mine)) == mine
    with pytest.raises(AssetError, match="neither an existing folder"):
        resolve_drafter("not-a-drafter")
