"""DLiteConfig validation and derivation, and the drafter's forward / draft contract."""

from __future__ import annotations

import pytest
import torch
from huggingface_hub.errors import StrictDataclassError
from tiny_models import make_drafter, make_tiny_target
from transformers import LlamaConfig, Qwen3Config

from dlite_hf import DLiteConfig, DLiteForSpeculation
from dlite_hf.modeling.configuration_dlite import default_target_layer_ids
from dlite_hf.training.history import SharedHistory, gather_history

V, H_T = 128, 64  # make_tiny_target's vocabulary and hidden size

# ---------------------------------------------------------------------------------------------------------------------
# DLiteConfig validation
# ---------------------------------------------------------------------------------------------------------------------

BAD_VALUES = [
    # (field, bad value, other fields the case needs)
    ("num_target_layers", 0, {"target_layer_ids": [0]}),
    ("num_target_layers", -4, {"target_layer_ids": [0]}),
    ("target_hidden_size", -64, {}),
    ("target_hidden_size", 0, {}),
    ("vocab_size", -1, {}),
    ("vocab_size", 0, {}),
    ("hidden_size", -32, {}),
    ("num_hidden_layers", -1, {}),
    ("num_hidden_layers", 0, {}),
    ("num_attention_heads", -8, {"head_dim": 8}),
    ("num_key_value_heads", -2, {}),
    ("num_key_value_heads", 0, {}),
    ("head_dim", -16, {}),
    ("intermediate_size", -1, {}),
    ("head_rank", 0, {}),
    ("head_rank", -64, {}),
    ("num_key_value_heads", 3, {"num_attention_heads": 8}),  # does not divide the heads
    ("num_key_value_heads", 5, {"num_attention_heads": 4}),
    ("num_draft_tokens", 0, {}),
    ("num_draft_tokens", -7, {}),
    ("num_draft_tokens", 65, {}),
    ("num_draft_tokens", 7.0, {}),
    ("target_layer_ids", [2, 1], {"num_target_layers": 4}),  # decreasing
    ("target_layer_ids", [1, 1, 2], {"num_target_layers": 4}),  # repeated
    ("target_layer_ids", [-1, 2], {"num_target_layers": 4}),  # below range
    ("target_layer_ids", [0, 4], {"num_target_layers": 4}),  # past the last layer
    ("target_layer_ids", [], {"num_target_layers": 4}),
    ("target_layer_ids", [0.5, 2], {"num_target_layers": 4}),
    ("history_window", -2, {}),
    ("history_window", -100, {}),
    ("history_window", 1.5, {}),
    ("backbone_type", "gpt2", {}),
    ("backbone_type", "Qwen3", {}),
    ("mask_token_id", -1, {"vocab_size": 16}),
    ("mask_token_id", 16, {"vocab_size": 16}),  # one past the vocabulary
    ("rms_norm_eps", 0.0, {}),
    ("rope_theta", -1.0, {}),
    ("draft_confidence_threshold", -0.1, {}),
    ("draft_confidence_threshold", 1.0, {}),  # would stop every round after one draft: say 0 <= t < 1
    ("draft_confidence_threshold", True, {}),
    ("draft_confidence_threshold", "0.1", {}),
    ("draft_skip_threshold", -0.5, {}),
    ("draft_skip_threshold", 1.5, {}),
    ("draft_lengths", [], {}),
    ("draft_lengths", [0, 3], {}),
    ("draft_lengths", [3, 3], {}),
    ("draft_lengths", [7, 3], {}),
    ("draft_lengths", [3, 8], {}),  # past num_draft_tokens=7
    ("draft_lengths", [True], {}),
    ("draft_lengths", 3, {}),
    ("lookup_fallback_min_match", -1, {}),
    ("lookup_fallback_min_match", 1.5, {}),
]


@pytest.mark.parametrize("field,value,extra", BAD_VALUES, ids=[f"{f}={v!r}" for f, v, _ in BAD_VALUES])
def test_config_rejects_bad_value_naming_field_and_value(field, value, extra):
    kwargs = {"num_target_layers": 4, "target_hidden_size": 64, "vocab_size": 128, **extra, field: value}
    with pytest.raises((ValueError, StrictDataclassError)) as raised:
        DLiteConfig(**kwargs)
    message = str(raised.value)
    if isinstance(raised.value, StrictDataclassError):  # a value of the wrong type: the typed field refuses it
        assert f"Field '{field}' expected" in message and f"(value: {value!r})" in message, message
    else:  # a value of the right type outside what is allowed: validate_dlite
        assert f"DLiteConfig.{field}={value!r}" in message and "expected" in message, message


def test_typed_config_checks_assignments_and_save_pretrained_reruns_the_dlite_checks(tmp_path):
    config = DLiteConfig(num_target_layers=4, target_hidden_size=64, vocab_size=128)
    with pytest.raises(StrictDataclassError, match="Field 'num_draft_tokens' expected int, got str"):
        config.num_draft_tokens = "7"
    config.num_draft_tokens = 0  # the right type: only the class validators can see it is out of range
    with pytest.raises(StrictDataclassError, match=r"(?s)validate_dlite.*num_draft_tokens=0 is invalid"):
        config.save_pretrained(tmp_path)
    assert not (tmp_path / "config.json").exists()
    config.num_draft_tokens = 5
    config.save_pretrained(tmp_path)
    assert DLiteConfig.from_pretrained(tmp_path).num_draft_tokens == 5
    with pytest.raises(ValueError, match=r"(?s)expected int, got float.*keyword overrides"):
        DLiteConfig.from_pretrained(tmp_path, num_draft_tokens=5.0)


def test_config_error_says_what_is_allowed():
    with pytest.raises(ValueError, match=r"indices in \[0, 3\].*4 layers"):
        DLiteConfig(num_target_layers=4, target_layer_ids=[1, 4])
    with pytest.raises(ValueError, match=r"divisor of num_attention_heads=8"):
        DLiteConfig(num_attention_heads=8, num_key_value_heads=3)
    with pytest.raises(ValueError, match=r"token id in \[0, 15\]"):
        DLiteConfig(vocab_size=16, mask_token_id=16)
    with pytest.raises(ValueError, match=r"\[1, 64\]"):
        DLiteConfig(num_draft_tokens=65)


def test_config_accepts_boundary_values():
    assert DLiteConfig(num_draft_tokens=1).num_draft_tokens == 1
    assert DLiteConfig(num_draft_tokens=64).num_draft_tokens == 64
    assert DLiteConfig(history_window=-1).history_window == -1
    assert DLiteConfig(history_window=5).history_window == 5
    assert DLiteConfig(vocab_size=16, mask_token_id=15).mask_token_id == 15
    assert DLiteConfig(vocab_size=16, mask_token_id=0).mask_token_id == 0
    assert DLiteConfig(num_target_layers=4, target_layer_ids=[0, 3]).target_layer_ids == [0, 3]
    assert DLiteConfig(backbone_type="llama").backbone_type == "llama"
    assert DLiteConfig(draft_confidence_threshold=0).draft_confidence_threshold == 0
    assert DLiteConfig(draft_confidence_threshold=0.999).draft_confidence_threshold == 0.999
    assert DLiteConfig(draft_lengths=[3, 7]).draft_lengths == [3, 7]
    assert DLiteConfig(num_draft_tokens=4, draft_lengths=[1, 4]).draft_lengths == [1, 4]
    config = DLiteConfig(target_hidden_size=64)
    assert config.hidden_size == 64 and config.intermediate_size == 3 * 64 and config.head_dim == 64 // 8


def test_config_survives_dict_round_trip():
    config = DLiteConfig(num_target_layers=6, target_layer_ids=[1, 3], history_window=4, mask_token_id=3)
    again = DLiteConfig.from_dict(config.to_dict())
    for name in ("num_target_layers", "target_layer_ids", "history_window", "mask_token_id", "hidden_size"):
        assert getattr(again, name) == getattr(config, name)


# ---------------------------------------------------------------------------------------------------------------------
# default_target_layer_ids and for_target
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_layers", list(range(1, 41)) + [48, 64, 80])
def test_default_target_layer_ids_properties(num_layers):
    for tapped in range(1, num_layers + 1):
        ids = default_target_layer_ids(num_layers, tapped)
        assert len(ids) == tapped, (num_layers, tapped, ids)
        assert all(b > a for a, b in zip(ids, ids[1:])), (num_layers, tapped, ids)
        assert 0 <= ids[0] and ids[-1] <= num_layers - 1, (num_layers, tapped, ids)
        DLiteConfig(num_target_layers=num_layers, target_layer_ids=ids)  # always a valid config
        if tapped <= num_layers - 3:  # fits in [1, L - 3]: the last two layers are skipped
            assert ids[0] >= 1 and ids[-1] <= num_layers - 3, (num_layers, tapped, ids)
            if tapped >= 2:
                assert ids[0] == 1 and ids[-1] == num_layers - 3, (num_layers, tapped, ids)
        if tapped >= 3:  # evenly spread: gaps within one rounding of the ideal step
            span = ids[-1] - ids[0]
            step = span / (tapped - 1)
            gaps = [b - a for a, b in zip(ids, ids[1:])]
            assert all(abs(gap - step) <= 1.0 + 1e-9 for gap in gaps), (num_layers, tapped, ids)
    with pytest.raises(ValueError, match=str(num_layers)):
        default_target_layer_ids(num_layers, num_layers + 1)


def test_default_target_layer_ids_examples_and_errors():
    assert default_target_layer_ids(36, 5) == [1, 9, 17, 25, 33]
    assert default_target_layer_ids(28, 1) == [13]
    assert default_target_layer_ids(1, 1) == [0]
    with pytest.raises(ValueError, match="num_target_layers must be >= 1, got 0"):
        default_target_layer_ids(0, 1)
    with pytest.raises(ValueError, match="num_tapped .* must be >= 1, got 0"):
        default_target_layer_ids(8, 0)
    # the config's own default taps min(4, L) layers and is valid for every depth
    for num_layers in range(1, 12):
        config = DLiteConfig(num_target_layers=num_layers)
        assert config.target_layer_ids == default_target_layer_ids(num_layers, min(4, num_layers))


def _qwen3_config():
    config = Qwen3Config(
        vocab_size=151936,
        hidden_size=2560,
        intermediate_size=9728,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
    )
    config.architectures = ["Qwen3ForCausalLM"]
    config._name_or_path = "Qwen/Qwen3-4B"
    return config


def _llama_config():
    config = LlamaConfig(
        vocab_size=128256,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
    )
    config.architectures = ["LlamaForCausalLM"]
    return config


@pytest.mark.parametrize(
    "make_config,layers,hidden,vocab,arch,model_type",
    [
        (_qwen3_config, 36, 2560, 151936, "Qwen3ForCausalLM", "qwen3"),
        (_llama_config, 16, 2048, 128256, "LlamaForCausalLM", "llama"),
    ],
)
def test_for_target(make_config, layers, hidden, vocab, arch, model_type):
    target_config = make_config()
    config = DLiteConfig.for_target(target_config)
    ids = config.target_layer_ids
    assert len(ids) == min(12, layers)
    assert ids[0] == 1 and ids[-1] == layers - 3  # evenly spread over [1, L - 3]
    assert all(b > a for a, b in zip(ids, ids[1:]))
    assert config.num_target_layers == layers
    assert config.target_hidden_size == hidden == config.hidden_size  # width defaults to the target's
    assert config.vocab_size == vocab
    assert config.target_model["architecture"] == arch
    assert config.target_model["model_type"] == model_type
    assert config.target_model["name_or_path"] == (target_config._name_or_path or "")

    named = DLiteConfig.for_target(
        target_config, num_target_layers_tapped=4, target_name_or_path="org/target", hidden_size=512, head_rank=32
    )
    assert named.target_layer_ids == default_target_layer_ids(layers, 4) and len(named.target_layer_ids) == 4
    assert named.target_model["name_or_path"] == "org/target"
    assert named.hidden_size == 512 and named.head_rank == 32 and named.target_hidden_size == hidden

    explicit = DLiteConfig.for_target(target_config, target_layer_ids=[0, 5, 9], num_target_layers_tapped=7)
    assert explicit.target_layer_ids == [0, 5, 9]
    with pytest.raises(ValueError, match=r"target_layer_ids=\[0, 99\]"):
        DLiteConfig.for_target(target_config, target_layer_ids=[0, 99])


# ---------------------------------------------------------------------------------------------------------------------
# forward / draft
# ---------------------------------------------------------------------------------------------------------------------


def _tapped_states(target, ids: torch.Tensor, layer_ids: list[int]) -> torch.Tensor:
    """`[B, T, L, H_t]` outputs of the tapped decoder layers (hidden_states[i + 1] is layer i's output)."""
    with torch.no_grad():
        hidden = target(ids, output_hidden_states=True).hidden_states
    return torch.stack([hidden[i + 1] for i in layer_ids], 2)


@pytest.mark.parametrize("backbone", ["qwen3", "llama"])
@pytest.mark.parametrize("width", [32, 64])  # 64 = the target's width: identity projections
def test_forward_and_draft_shapes(target, backbone, width):
    drafter = make_drafter(target, seed=1, backbone_type=backbone, hidden_size=width, num_draft_tokens=5)
    drafter.bind_target(target)
    n, k, num_tapped = 6, 5, drafter.config.num_tapped_layers
    context = torch.randn(n, num_tapped, H_T, generator=torch.Generator().manual_seed(0))
    anchors = torch.randint(0, V, (n,), generator=torch.Generator().manual_seed(1))
    drafts = torch.randint(0, V, (n, k), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        out = drafter(context, anchors, drafts)
    assert out.logits.shape == (n, k, V) and out.logits.dtype == torch.float32
    assert out.hidden_states.shape == (n, k, width)
    assert torch.isfinite(out.logits).all()
    tokens, logits = drafter.draft(context, anchors)
    assert tokens.shape == (n, k) and logits.shape == (n, k, V) and tokens.dtype == torch.long
    tokens, logits = drafter.draft(context, anchors, num_tokens=2)
    assert tokens.shape == (n, 2) and logits.shape == (n, 2, V)
    for bad in (0, k + 1):
        with pytest.raises(ValueError, match=f"num_tokens={bad} is invalid"):
            drafter.draft(context, anchors, num_tokens=bad)
    with pytest.raises(ValueError, match=r"context_states has shape \(6, 9, 64\)"):
        drafter(torch.zeros(n, 9, H_T), anchors, drafts)


def _joint_confidence(tokens: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """`[N, n]` running product of the probabilities the (processed) draft logits gave the drafted tokens."""
    return logits.softmax(-1).gather(-1, tokens[..., None])[..., 0].double().cumprod(-1)


def _between_rows(values: torch.Tensor) -> float:
    """A threshold halfway between the two middle rows' values: half the rows fall on each side, and none sits within
    rounding of it (a row drafted alone differs from its batched self in the last bits, which must not decide)."""
    ordered = values.sort().values
    middle = len(ordered) // 2
    return float(ordered[middle - 1] + ordered[middle]) / 2


@pytest.mark.parametrize(
    ("stop", "skip", "lengths"), [(True, False, None), (True, False, [3, 5]), (False, True, None), (True, True, None)]
)
def test_row_lengths_are_where_each_row_alone_would_stop(target, stop, skip, lengths):
    """A batched round runs until every row is unsure; `draft_row_lengths` gives each row the drafts it would have
    drafted alone: the same count and, being a prefix of the batch's, the same tokens."""
    drafter = make_drafter(target, seed=3, num_draft_tokens=7).bind_target(target)
    with torch.no_grad():
        drafter.norm.weight.mul_(8.0)  # spread the probabilities of a random drafter over a wide range
    context = torch.randn(8, drafter.config.num_tapped_layers, H_T, generator=torch.Generator().manual_seed(9))
    anchors = torch.tensor([3, 17, 5, 40, 9, 22, 61, 2])
    with torch.no_grad():
        full_tokens, full_logits = drafter.draft(context, anchors)
        joint = _joint_confidence(full_tokens, full_logits)
        rules = {  # thresholds inside the rows' spread, so that rows stop at different counts
            "confidence_threshold": _between_rows(joint[:, 2]) if stop else 0.0,
            "skip_threshold": _between_rows(joint[:, 0]) if skip else 0.0,
        }
        drafter.config.draft_lengths = lengths
        tokens, logits = drafter.draft(context, anchors, **rules)
        kept = drafter.draft_row_lengths(tokens, logits, **rules)
        alone = [drafter.draft(context[r : r + 1], anchors[r : r + 1], **rules)[0] for r in range(8)]
    assert kept == [a.shape[1] for a in alone] and len(set(kept)) > 1
    for row, own in enumerate(alone):
        assert torch.equal(tokens[row, : kept[row]], own[0])
    assert (
        drafter.draft_row_lengths(tokens, logits, confidence_threshold=0.0, skip_threshold=0.0)
        == [tokens.shape[1]] * 8
    )


def test_confidence_and_skip_thresholds_stop_where_the_drafter_is_unsure(target):
    drafter = make_drafter(target, seed=3, num_draft_tokens=7).bind_target(target)
    with torch.no_grad():
        drafter.norm.weight.mul_(8.0)  # spread the probabilities of a random drafter over a wide range
    context = torch.randn(2, drafter.config.num_tapped_layers, H_T, generator=torch.Generator().manual_seed(5))
    anchors = torch.tensor([3, 17])
    with torch.no_grad():
        full_tokens, full_logits = drafter.draft(context, anchors)  # config threshold 0: K tokens
        assert full_tokens.shape == (2, 7)
        joint = _joint_confidence(full_tokens, full_logits)
        assert (joint[:, 1:] < joint[:, :-1]).all()  # strictly falling: every threshold below picks one stop
        for row in range(2):
            for stop in range(1, 7):  # a threshold between the joint probabilities after `stop` and `stop + 1` drafts
                threshold = float(joint[row, stop - 1] + joint[row, stop]) / 2
                tokens, logits = drafter.draft(
                    context[row : row + 1], anchors[row : row + 1], confidence_threshold=threshold
                )
                assert tokens.shape == (1, stop + 1), (row, stop, threshold)  # the draft that fell below is kept
                assert torch.equal(tokens, full_tokens[row : row + 1, : stop + 1])  # a prefix of the K-token draft
                torch.testing.assert_close(logits, full_logits[row : row + 1, : stop + 1])  # batch of 1 vs 2
        # a batch stops only when every row has fallen below: at the longer of the two rows' stops
        threshold = float(joint[:, 2].max() + joint[:, 2].min()) / 2
        lengths = [int((joint[row] >= threshold).sum()) + 1 for row in range(2)]
        tokens, _ = drafter.draft(context, anchors, confidence_threshold=threshold)
        assert tokens.shape == (2, min(7, max(lengths))) and min(lengths) < max(lengths)
        assert torch.equal(tokens, full_tokens[:, : tokens.shape[1]])
        # the config field is the default; a threshold above every first probability still drafts one token
        drafter.config.draft_confidence_threshold = 0.999
        assert drafter.draft(context, anchors)[0].shape == (2, 1)
        drafter.config.draft_confidence_threshold = 0.0
        # draft_lengths: a round that falls below the threshold keeps drafting up to the next allowed length
        drafter.config.draft_lengths = [3, 5]
        for stop, expected in ((1, 3), (2, 3), (3, 5), (4, 5), (5, 7)):  # falls below after stop + 1; K is allowed
            threshold = float(joint[0, stop - 1] + joint[0, stop]) / 2
            tokens, _ = drafter.draft(context[:1], anchors[:1], confidence_threshold=threshold)
            assert torch.equal(tokens, full_tokens[:1, :expected]), (stop, expected)
        tokens, _ = drafter.draft(context[:1], anchors[:1], num_tokens=2, confidence_threshold=0.999)
        assert tokens.shape == (1, 2)  # a budget below every allowed length still ends the round
        drafter.config.draft_lengths = None
        # skip: nothing is proposed only when every row's first draft is below the skip threshold
        first = joint[:, 0]
        for skip, expected in ((float(first.max()) * 1.01, 0), (float(first.min() + first.max()) / 2, 7)):
            tokens, logits = drafter.draft(context, anchors, skip_threshold=skip)
            assert tokens.shape == (2, expected) and logits.shape == (2, expected, V), skip
        tokens, _ = drafter.draft(context[:1], anchors[:1], skip_threshold=float(first[0]) * 0.99)
        assert torch.equal(tokens, full_tokens[:1])
    for bad in (-0.5, 1.0):
        with pytest.raises(ValueError, match=f"confidence_threshold={bad} is invalid"):
            drafter.draft(context, anchors, confidence_threshold=bad)
        with pytest.raises(ValueError, match=f"skip_threshold={bad} is invalid"):
            drafter.draft(context, anchors, skip_threshold=bad)


@pytest.mark.parametrize("window", [0, -1, 3])
def test_teacher_forced_forward_equals_step_by_step_draft(target, window):
    drafter = make_drafter(target, seed=2, history_window=window).bind_target(target)
    # scale the head so that the in-block token feedback visibly changes the logits
    with torch.no_grad():
        drafter.head.up.weight.mul_(20.0)
    ids = torch.randint(1, V, (2, 14), generator=torch.Generator().manual_seed(3))
    states = _tapped_states(target, ids, drafter.config.target_layer_ids)  # [2, 14, L, H_t]
    anchor_pos = torch.tensor([[1, 4, 9, 13], [2, 5, 7, 12]])
    rows = torch.arange(2)[:, None]
    context = states[rows, anchor_pos - 1].flatten(0, 1)  # [8, L, H_t]
    anchor_ids = ids[rows, anchor_pos].flatten()
    history = {}
    if window != 0:
        hist, valid, pos = gather_history(states, anchor_pos - 1, window)
        history = {"history_states": hist, "history_valid": valid, "history_positions": pos}
        assert hist.shape[:2] == valid.shape == pos.shape
        assert hist.shape[1] == (3 if window == 3 else int((anchor_pos - 1).max()))
    tokens, draft_logits = drafter.draft(context, anchor_ids, **history)
    with torch.no_grad():
        forward_logits = drafter(context, anchor_ids, tokens, **history).logits
    torch.testing.assert_close(forward_logits, draft_logits, atol=1e-5, rtol=0)
    assert torch.equal(forward_logits.argmax(-1), tokens)

    # the check above has teeth: other in-block tokens change positions 2..K, never position 1, and the last
    # column of draft_input_ids is never read
    other = (tokens + 1) % V
    with torch.no_grad():
        shifted = drafter(context, anchor_ids, other, **history).logits
        last_changed = torch.cat([tokens[:, :-1], other[:, -1:]], 1)
        same = drafter(context, anchor_ids, last_changed, **history).logits
    torch.testing.assert_close(shifted[:, 0], forward_logits[:, 0], atol=1e-6, rtol=0)
    assert (shifted[:, 1:] - forward_logits[:, 1:]).abs().amax() > 1e-3
    torch.testing.assert_close(same, forward_logits, atol=1e-6, rtol=0)

    if window != 0:  # the history matters for history drafters, and is required
        with torch.no_grad():
            no_past = drafter(
                context,
                anchor_ids,
                tokens,
                history["history_states"],
                torch.zeros_like(history["history_valid"]),
                history["history_positions"],
            ).logits
        assert (no_past - forward_logits).abs().amax() > 1e-4
        with pytest.raises(ValueError, match=f"history_window={window}"):
            drafter(context, anchor_ids, tokens)


def test_shared_history_pass_equals_one_history_copy_per_block(target):
    """Training's shared history (one backbone pass over each sequence's past, read by all its blocks) gives the
    per-block result, gradients included; it refuses sliding windows, where it would not be exact."""
    drafter = make_drafter(target, seed=4, history_window=-1).bind_target(target)
    ids = torch.randint(1, V, (2, 16), generator=torch.Generator().manual_seed(5))
    states = _tapped_states(target, ids, drafter.config.target_layer_ids)  # [2, 16, L, H_t]
    anchor_pos = torch.tensor([[1, 5, 9, 14], [3, 4, 11, 15]])  # anchor 1: context 0, no history at all
    rows = torch.arange(2)[:, None]
    context = states[rows, anchor_pos - 1].flatten(0, 1)
    anchor_ids = ids[rows, anchor_pos].flatten()
    drafts = torch.randint(1, V, (8, drafter.config.num_draft_tokens), generator=torch.Generator().manual_seed(6))
    hist, valid, pos = gather_history(states, anchor_pos - 1, -1)
    per_block = drafter(context, anchor_ids, drafts, hist, valid, pos).logits
    shared = drafter(context, anchor_ids, drafts, block_encoder=SharedHistory(states, anchor_pos - 1)).logits
    torch.testing.assert_close(shared, per_block, atol=1e-5, rtol=1e-5)
    # the same gradients for every weight
    drafter.train()
    grads = []
    for kwargs in (
        {"history_states": hist, "history_valid": valid, "history_positions": pos},
        {"block_encoder": SharedHistory(states, anchor_pos - 1)},
    ):
        drafter.zero_grad()
        drafter(context, anchor_ids, drafts, **kwargs).logits.logsumexp(-1).sum().backward()
        grads.append({n: p.grad.clone() for n, p in drafter.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and "history_proj.weight" in grads[0]
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-4, rtol=1e-4, msg=name)
    # a block sees only its own sequence's past: changing the other sequence's states changes nothing here
    other = states.clone()
    other[1] += 1.0
    again = drafter(context, anchor_ids, drafts, block_encoder=SharedHistory(other, anchor_pos - 1)).logits
    torch.testing.assert_close(again[:4], shared[:4], atol=1e-5, rtol=1e-5)
    assert (again[4:] - shared[4:]).abs().amax() > 1e-4
    window = make_drafter(target, seed=4, history_window=3).bind_target(target)
    with pytest.raises(ValueError, match="exact only for full-history drafters"):
        window(context, anchor_ids, drafts, block_encoder=SharedHistory(states, anchor_pos - 1))


def test_windowed_blocks_cut_to_their_own_history_give_the_uncut_result(target, monkeypatch):
    """A windowed batch runs in groups of blocks, each cut to the longest history one of its blocks reads (an invalid
    history row is only ever a masked key): the same logits and gradients as one uncut pass over the whole window,
    for far fewer backbone rows when most contexts are shorter than the window."""
    from dlite_hf.modeling import blocks

    drafter = make_drafter(target, seed=4, history_window=12).bind_target(target)
    ids = torch.randint(1, V, (2, 20), generator=torch.Generator().manual_seed(5))
    states = _tapped_states(target, ids, drafter.config.target_layer_ids)  # [2, 20, L, H_t]
    # contexts 0 (no past at all), 1, 2, ... and one of 15 > 12 (a full window, so one group means no cut)
    anchor_pos = torch.tensor([[1, 2, 3, 4, 6, 16], [2, 3, 5, 7, 9, 4]])
    rows = torch.arange(2)[:, None]
    context = states[rows, anchor_pos - 1].flatten(0, 1)
    anchor_ids = ids[rows, anchor_pos].flatten()
    drafts = torch.randint(1, V, (12, drafter.config.num_draft_tokens), generator=torch.Generator().manual_seed(6))
    history = dict(
        zip(("history_states", "history_valid", "history_positions"), gather_history(states, anchor_pos - 1, 12))
    )
    seen = []
    backbone = drafter.run_backbone

    def counting(hidden, *args):
        seen.append(hidden.shape[0] * hidden.shape[1])
        return backbone(hidden, *args)

    monkeypatch.setattr(drafter, "run_backbone", counting)
    drafter.train()
    results = []
    for groups in (1, blocks.WINDOW_GROUPS):
        monkeypatch.setattr(blocks, "WINDOW_GROUPS", groups)
        seen.clear()
        drafter.zero_grad()
        logits = drafter(context, anchor_ids, drafts, **history).logits
        logits.logsumexp(-1).sum().backward()
        grads = {n: p.grad.clone() for n, p in drafter.named_parameters() if p.grad is not None}
        results.append((logits.detach(), grads, sum(seen)))
    (uncut, uncut_grads, uncut_rows), (cut, cut_grads, cut_rows) = results
    rows_per_block = 12 + drafter.config.num_tapped_layers + 1 + drafter.config.num_draft_tokens
    assert uncut_rows == 12 * rows_per_block and cut_rows < 0.75 * uncut_rows
    torch.testing.assert_close(cut, uncut, atol=1e-5, rtol=1e-5)
    assert uncut_grads.keys() == cut_grads.keys() and "history_proj.weight" in cut_grads
    for name in cut_grads:
        torch.testing.assert_close(cut_grads[name], uncut_grads[name], atol=1e-4, rtol=1e-4, msg=name)


def test_gather_history_windows():
    states = torch.arange(2 * 6, dtype=torch.float32).reshape(2, 6, 1, 1)  # value = 6 * b + t
    hist, valid, pos = gather_history(states, torch.tensor([[0, 3], [5, 2]]), 2)
    assert hist.shape == (4, 2, 1, 1)
    assert valid.tolist() == [[False, False], [True, True], [True, True], [True, True]]
    assert pos.tolist() == [[-2, -1]] * 4
    assert hist[1, :, 0, 0].tolist() == [1.0, 2.0] and hist[2, :, 0, 0].tolist() == [9.0, 10.0]
    hist, valid, pos = gather_history(states, torch.tensor([[4], [1]]), -1)
    assert hist.shape[1] == 4 and valid.tolist() == [[True] * 4, [False] * 3 + [True]]
    assert hist[0, :, 0, 0].tolist() == [0.0, 1.0, 2.0, 3.0] and hist[1, -1, 0, 0].item() == 6.0
    with pytest.raises(ValueError, match="history_window != 0"):
        gather_history(states, torch.tensor([[1]]), 0)


def test_state_dict_holds_only_the_drafters_own_weights(target):
    drafter = make_drafter(target, seed=3)
    keys_before = set(drafter.state_dict())
    drafter.bind_target(target)
    state = drafter.state_dict()
    assert set(state) == keys_before  # binding registers nothing
    assert set(state) == {name for name, _ in drafter.named_parameters()}  # no persistent buffers, no extras
    assert not [k for k in state if "embed_tokens" in k or "lm_head" in k or k.startswith("model.")]
    target_storage = {p.data_ptr() for p in target.parameters()}
    assert not [k for k, v in state.items() if v.data_ptr() in target_storage]
    assert not [k for k, v in state.items() if v.shape[0] == V]  # no [vocab, ...] table: nothing copied
    assert len(list(drafter.parameters())) == len(state)
    own = sum(v.numel() for v in state.values())
    big_vocab = make_drafter(make_tiny_target("qwen3", seed=11, vocab_size=4 * V), seed=3)
    assert sum(v.numel() for v in big_vocab.state_dict().values()) == own  # the vocabulary costs the drafter nothing
    assert "mask_embedding" in state


def test_mask_token_id_variant(target):
    drafter = make_drafter(target, seed=4, mask_token_id=5).bind_target(target)
    assert drafter.mask_embedding is None and "mask_embedding" not in drafter.state_dict()
    context = torch.randn(3, drafter.config.num_tapped_layers, H_T, generator=torch.Generator().manual_seed(5))
    anchors = torch.tensor([1, 2, 3])
    tokens, logits = drafter.draft(context, anchors)
    assert tokens.shape == (3, 7) and logits.shape == (3, 7, V)
    with torch.no_grad():
        forward_logits = drafter(context, anchors, tokens).logits
    torch.testing.assert_close(forward_logits, logits, atol=1e-5, rtol=0)
    drafter.config.mask_token_id = 6  # the placeholder really is the target's embedding of that token
    _, other_logits = drafter.draft(context, anchors)
    assert (other_logits - logits).abs().amax() > 1e-4
    assert isinstance(drafter, DLiteForSpeculation)
