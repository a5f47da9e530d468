"""DLiteTrainer: every stage trains, a short run learns, resume continues, saves hold the drafter and a card."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from tiny_models import HUB_CODE_FILES, make_drafter, make_tiny_target

from dlite_hf import DLiteForSpeculation
from dlite_hf.draft_vocab import set_draft_vocab
from dlite_hf.training.arguments import DLiteTrainingArguments
from dlite_hf.training.data import DLiteCollator, RegeneratedDataset
from dlite_hf.training.trainer import DLiteTrainer


@pytest.fixture(scope="module")
def tiny_setup():
    target = make_tiny_target("qwen3", seed=0)
    prompts = torch.randint(1, 128, (24, 6), generator=torch.Generator().manual_seed(1))
    sequences = target.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=30, do_sample=False)
    rows = [{"input_ids": s.tolist(), "loss_mask": [0] * 6 + [1] * 30} for s in sequences]
    return target, RegeneratedDataset(rows)


def _args(tmp_path, stage, **overrides):
    kwargs = dict(
        output_dir=str(tmp_path / stage),
        stage=stage,
        max_steps=2,
        per_device_train_batch_size=4,
        num_anchors=4,
        logging_steps=1,
        save_steps=1000,
        learning_rate=1e-3,
        report_to="none",
        disable_tqdm=True,
    )
    if stage == "warmup":
        kwargs["teacher_path"] = str(tmp_path / "teacher")
    kwargs.update(overrides)
    return DLiteTrainingArguments(**kwargs)


@pytest.mark.parametrize("stage", ["teacher", "warmup", "stable"])
def test_two_step_smoke_every_parameter_changes(tiny_setup, tmp_path, stage):
    target, dataset = tiny_setup
    model = make_drafter(target, seed=1, history_window=-1 if stage == "teacher" else 0)
    teacher = make_drafter(target, seed=2, history_window=-1) if stage == "warmup" else None
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainer = DLiteTrainer(
        model=model, target=target, args=_args(tmp_path, stage), train_dataset=dataset, teacher=teacher
    )
    trainer.train()
    unchanged = [name for name, p in model.named_parameters() if torch.equal(p, before[name])]
    assert unchanged == []
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses and all(torch.isfinite(torch.tensor(losses)))
    logged = [entry for entry in trainer.state.log_history if "expected_tau_greedy" in entry]
    assert logged and 1.0 <= logged[-1]["expected_tau_greedy"] <= 8.0
    assert all(not any(p.requires_grad for p in m.parameters()) for m in [target] + ([teacher] if teacher else []))


@pytest.mark.heavy  # 200 training steps: in `make test` and CI, not test-fast
def test_short_run_learns(tiny_setup, tmp_path):
    target, dataset = tiny_setup
    model = make_drafter(target, seed=3)
    # CE only: a random tiny target's p^T is nearly uniform, so the TV term would mostly pull q towards uniform
    args = _args(
        tmp_path,
        "stable",
        max_steps=200,
        lambda_ce=1.0,
        lambda_tv=0.0,
        learning_rate=1e-2,
        num_anchors=8,
        logging_steps=10,
        save_strategy="no",
    )
    trainer = DLiteTrainer(model=model, target=target, args=args, train_dataset=dataset)
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    mean = lambda key, entries: sum(e[key] for e in entries) / len(entries)  # noqa: E731
    first, last = logs[:3], logs[-3:]
    assert mean("loss", last) < 0.75 * mean("loss", first), (mean("loss", first), mean("loss", last))
    assert mean("top1_pos1", last) > mean("top1_pos1", first) + 0.2
    assert mean("expected_tau_greedy", last) > mean("expected_tau_greedy", first)


def test_resume_continues_step_and_optimizer(tiny_setup, tmp_path):
    target, dataset = tiny_setup
    args = _args(tmp_path, "stable", max_steps=4, save_steps=2, output_dir=str(tmp_path / "run"))
    first = DLiteTrainer(model=make_drafter(target, seed=4), target=target, args=args, train_dataset=dataset)
    first.train()
    checkpoint = Path(args.output_dir) / "checkpoint-2"
    optimizer_state = torch.load(checkpoint / "optimizer.pt", weights_only=False)
    # "kill" after step 2: a fresh process state resumes from checkpoint-2 and continues to step 4
    resumed = DLiteTrainer(model=make_drafter(target, seed=99), target=target, args=args, train_dataset=dataset)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed.state.global_step == 4
    steps = [entry["step"] for entry in resumed.state.log_history if "loss" in entry]
    assert steps[-1] == 4 and 3 in steps
    restored = resumed.optimizer.state_dict()["state"]
    assert optimizer_state["state"].keys() == restored.keys()
    assert all(int(restored[k]["step"]) == 4 for k in restored)  # Adam step counters continued from 2


def test_checkpoint_holds_only_the_drafter_code_and_card(tiny_setup, tmp_path):
    target, dataset = tiny_setup
    model = make_drafter(target, seed=5)
    args = _args(tmp_path, "stable", save_steps=2)
    trainer = DLiteTrainer(model=model, target=target, args=args, train_dataset=dataset)
    trainer.train()
    trainer.save_model(args.output_dir)
    folder = Path(args.output_dir)
    names = {p.name for p in folder.iterdir()}
    assert {"model.safetensors", "config.json", "README.md", *HUB_CODE_FILES} <= names
    assert not any(name.endswith(".bin") and name != "training_args.bin" for name in names)
    with safe_open(folder / "model.safetensors", "pt") as handle:
        keys = list(handle.keys())
    assert keys and not any("embed_tokens" in k or "lm_head" in k for k in keys)
    card = (folder / "README.md").read_text()
    assert "library_name: transformers" in card and "stable" in card
    assert json.loads((folder / "config.json").read_text())["auto_map"]["AutoModel"].endswith("DLiteForSpeculation")
    reloaded = DLiteForSpeculation.from_pretrained(folder)
    assert all(torch.equal(a, b) for a, b in zip(reloaded.state_dict().values(), model.state_dict().values()))


def test_gradient_accumulation_counts_items_globally(tiny_setup, tmp_path):
    target, dataset = tiny_setup
    collator = DLiteCollator(0, num_anchors=4, num_draft_tokens=7, seed=0)
    batch = collator([dataset[i] for i in range(4)])
    assert batch["labels"].shape == (4, 4, 7)
    assert (batch["labels"].ne(-100) <= batch["anchor_valid"][..., None]).all()


def test_stage_misconfigurations_raise(tiny_setup, tmp_path):
    target, dataset = tiny_setup
    with pytest.raises(ValueError, match="history_window"):
        DLiteTrainer(model=make_drafter(target), target=target, args=_args(tmp_path, "teacher"), train_dataset=dataset)
    with pytest.raises(ValueError, match="teacher"):
        DLiteTrainer(model=make_drafter(target), target=target, args=_args(tmp_path, "warmup"), train_dataset=dataset)
    wrong_target = make_tiny_target("llama", seed=0, num_layers=3)
    with pytest.raises(ValueError, match="layers"):
        DLiteTrainer(
            model=make_drafter(target), target=wrong_target, args=_args(tmp_path, "stable"), train_dataset=dataset
        )


def test_stable_stage_on_the_draft_vocabulary(tiny_setup, tmp_path):
    target, dataset = tiny_setup
    model = make_drafter(target, seed=6, draft_vocab_size=40)
    from dlite_hf.training.data import response_token_counts

    set_draft_vocab(model, response_token_counts(dataset, 128))
    context = torch.randn(3, model.config.num_tapped_layers, 64)
    anchors, drafts = torch.tensor([1, 2, 3]), torch.randint(0, 128, (3, 7))
    model.bind_target(target)
    restricted = model(context, anchors, drafts, restrict_to_draft_vocab=True).logits
    full = model(context, anchors, drafts).logits
    ids = model.draft_vocab_ids
    assert torch.allclose(restricted[..., ids], full[..., ids], atol=1e-5)
    assert torch.isinf(restricted).sum() == 3 * 7 * (128 - 40)
    tokens, logits = model.draft(context, anchors)  # inference drafts from exactly this distribution
    teacher_forced = model(context, anchors, tokens, restrict_to_draft_vocab=True).logits
    assert torch.allclose(teacher_forced[torch.isfinite(logits)], logits[torch.isfinite(logits)], atol=1e-5)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainer = DLiteTrainer(model=model, target=target, args=_args(tmp_path, "stable"), train_dataset=dataset)
    trainer.train()
    assert all(not torch.equal(p, before[n]) for n, p in model.named_parameters())
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert all(torch.isfinite(torch.tensor(losses)))


def _reference_stable_loss(trainer, model, batch):
    """The stable loss built the long way: full-vocabulary target logits and a -inf-scattered drafter."""
    from dlite_hf.data.features.transformers import target_features
    from dlite_hf.training.losses import position_weights, weighted_cross_entropy, weighted_l1

    ids, anchors, labels = batch["input_ids"], batch["anchors"], batch["labels"]
    k = model.config.num_draft_tokens
    states, final = target_features(trainer.target, ids, model.config.target_layer_ids, batch["attention_mask"])
    rows = torch.arange(ids.shape[0])[:, None]
    positions = (anchors[..., None] + torch.arange(1, k + 1)).clamp(max=ids.shape[1] - 1)
    p_logits = trainer.target.get_output_embeddings()(final[rows[..., None], positions - 1].flatten(0, 1))
    q_logits = model(
        states[rows, anchors - 1].flatten(0, 1),
        ids[rows, anchors].flatten(),
        ids[rows[..., None], positions].flatten(0, 1),
        restrict_to_draft_vocab=True,
    ).logits
    labels, valid = labels.flatten(0, 1), labels.ne(-100).flatten(0, 1)
    weights = position_weights(k, trainer.args.loss_decay_gamma, trainer.args.loss_decay_form)
    in_vocab = valid & torch.isin(labels, model.draft_vocab_ids)
    ce = weighted_cross_entropy(q_logits, labels, in_vocab, weights)
    return trainer.args.lambda_ce * ce + trainer.args.lambda_tv * weighted_l1(p_logits, q_logits, valid, weights)


@pytest.mark.parametrize(
    ("cached", "stride"),
    [(False, 1), (True, 1), (True, 3), ("all", 3)],
    ids=["online", "feature-cache", "cache-stride-3", "every-position-cache"],
)
def test_compact_stable_loss_equals_full_vocabulary_loss(tiny_setup, tmp_path, cached, stride):
    """The stable stage computes on the draft vocabulary only (cached logsumexp/argmax, and with a stride the
    history-free cache's anchors-only states); the value is the same. A history-free run given a cache of every
    position (built for history-aware runs) reads it as it is, with the same value."""
    from dlite_hf.data.features.cache import FeatureCache
    from dlite_hf.training.data import response_token_counts

    target, dataset = tiny_setup
    model = make_drafter(target, seed=7, draft_vocab_size=40)
    set_draft_vocab(model, response_token_counts(dataset, 128))
    overrides = {"feature_cache_dir": str(tmp_path / "cache"), "anchor_stride": stride} if cached else {}
    if cached == "all":
        FeatureCache(str(tmp_path / "cache"), cache_name(target), model.config.target_layer_ids)
    trainer = DLiteTrainer(
        model=model, target=target, args=_args(tmp_path, "stable", **overrides), train_dataset=dataset
    )
    if cached == "all":
        assert not trainer.feature_cache.history_free and trainer.feature_cache.anchor_stride == 1
    batch = trainer.data_collator([dataset[i] for i in range(4)])
    model.eval()
    with torch.no_grad():
        for _ in range(2 if cached else 1):  # with a cache: the first call writes it, the second reads it
            loss = trainer.compute_loss(model, batch)
        expected = _reference_stable_loss(trainer, model, batch)
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-4)
    logged = trainer._metrics["eval"]
    assert len(logged["top1_pos1"]) == (2 if cached else 1)


def test_feature_cache_adds_vocab_stats_to_old_entries(tiny_setup, tmp_path):
    from safetensors.torch import load_file, save_file

    from dlite_hf.data.features.cache import FeatureCache

    target, dataset = tiny_setup
    cache = FeatureCache(str(tmp_path / "cache"), "tiny", [0, 1])
    ids = torch.tensor([dataset[0]["input_ids"]])
    mask = torch.ones_like(ids)
    states, final, stats = cache.features(target, ids, mask)
    path = cache._path(cache.key(ids[0]))
    entry = load_file(str(path))
    logits = target.get_output_embeddings()(entry["final"].float())
    torch.testing.assert_close(entry["lse"], logits.logsumexp(-1))
    assert torch.equal(entry["top1"], logits.argmax(-1)) and torch.equal(stats["top1"][0], entry["top1"])
    save_file({"states": entry["states"], "final": entry["final"]}, str(path))  # an entry from before the stats
    _, _, again = cache.features(target, ids, mask)
    torch.testing.assert_close(again["lse"], stats["lse"])
    assert "lse" in load_file(str(path))


def test_a_run_tapping_a_subset_of_the_caches_layers_reads_them_from_its_entries(tiny_setup, tmp_path):
    """One feature pass serves drafters tapping any subset of its layers (the shape study's 6 of 11): the states read
    are the target's at the run's layers, in the run's order; a layer the cache lacks is refused."""
    from safetensors.torch import load_file

    from dlite_hf.data.features.cache import FeatureCache
    from dlite_hf.data.features.transformers import target_features

    target, dataset = tiny_setup
    ids = torch.tensor([dataset[0]["input_ids"]])
    mask = torch.ones_like(ids)
    full, _, _ = FeatureCache(str(tmp_path / "cache"), "tiny", [0, 1]).features(target, ids, mask)  # writes
    subset = FeatureCache(str(tmp_path / "cache"), "tiny", [1, 0])
    assert subset.layer_ids == [0, 1] and subset.take == [1, 0]
    states, _, _ = subset.features(target, ids, mask)
    torch.testing.assert_close(states, full[:, :, [1, 0]], rtol=0, atol=0)
    torch.testing.assert_close(states[:, :, 0], target_features(target, ids, [1], mask)[0][:, :, 0].half().float())
    other = torch.tensor([dataset[1]["input_ids"]])  # an entry the subset's run writes holds every manifest layer
    subset.features(target, other, torch.ones_like(other))
    assert load_file(str(subset._path(subset.key(other[0]))))["states"].shape[1] == 2
    with pytest.raises(ValueError, match="was built for"):
        FeatureCache(str(tmp_path / "cache"), "tiny", [0, 2])


def test_two_runs_writing_one_cache_entry_at_once_both_succeed(tiny_setup, tmp_path, monkeypatch):
    """Runs sharing a cache read the same rows in the same seeded order, so two may add the vocabulary stats to one
    entry at once. Here the second run writes the entry between the first's write and its rename; with one shared
    temporary name that rename raised FileNotFoundError (the second run had renamed the file away)."""
    import safetensors.torch
    from safetensors.torch import load_file

    from dlite_hf.data.features import cache as features
    from dlite_hf.data.features.cache import FeatureCache

    target, dataset = tiny_setup
    first, second = (FeatureCache(str(tmp_path / "cache"), "tiny", [0, 1]) for _ in range(2))
    ids = torch.tensor([dataset[0]["input_ids"]])
    key = first.key(ids[0])
    entry = {"states": torch.zeros(3, 2, 4), "final": torch.ones(3, 4)}
    real_save = safetensors.torch.save_file
    interleaved = []

    def save_then_let_the_other_run_write(tensors, filename, *args, **kwargs):
        real_save(tensors, filename, *args, **kwargs)
        if not interleaved:  # the other run's whole write lands here, once
            interleaved.append(filename)
            second._write(key, entry)

    monkeypatch.setattr(safetensors.torch, "save_file", save_then_let_the_other_run_write)
    monkeypatch.setattr(features.threading, "get_ident", lambda: len(interleaved))  # two "processes"
    first._write(key, entry)
    assert interleaved and torch.equal(load_file(str(first._path(key)))["final"], entry["final"])
    assert not list(first._path(key).parent.glob("*.tmp"))


def test_history_free_feature_cache_keeps_only_what_blocks_read(tiny_setup, tmp_path):
    """Final states from the first label minus one, tapped states at the strided anchors' contexts: equal to the
    target's forward there, and a batch whose anchors the layout did not keep is refused."""
    from safetensors.torch import load_file

    from dlite_hf.data.features.cache import FeatureCache
    from dlite_hf.data.features.transformers import target_features
    from dlite_hf.training.data import DLiteCollator

    target, dataset = tiny_setup
    model = make_drafter(target, seed=7)
    args = _args(tmp_path, "stable", feature_cache_dir=str(tmp_path / "cache"), anchor_stride=4)
    trainer = DLiteTrainer(model=model, target=target, args=args, train_dataset=dataset)
    cache = trainer.feature_cache
    assert cache.history_free and cache.anchor_stride == 4
    row = dataset[0]
    batch = trainer.data_collator([row])
    start = row["loss_mask"].index(1)
    assert batch["response_start"].tolist() == [start]
    assert bool((batch["anchors"][batch["anchor_valid"]] % 4 == 0).all())
    ids = batch["input_ids"]
    states, final, stats = cache.features(target, ids, batch["attention_mask"], batch["response_start"])
    ref_states, ref_final = target_features(target, ids, model.config.target_layer_ids, batch["attention_mask"])
    first, positions = cache.kept(ids.shape[1], start)
    assert first == start - 1 and positions.tolist() == [a - 1 for a in range(first, ids.shape[1]) if a % 4 == 0]
    torch.testing.assert_close(states[0, positions], ref_states[0, positions].half().float())
    torch.testing.assert_close(final[0, first:], ref_final[0, first:].half().float())
    assert stats["kept"][0].nonzero().flatten().tolist() == positions.tolist()
    entry = load_file(str(cache._path(f"{cache.key(ids[0])}-{first}")))
    assert (
        entry["states"].shape[0] == len(positions) < ids.shape[1] and entry["final"].shape[0] == ids.shape[1] - first
    )
    unstrided = DLiteCollator(0, num_anchors=8, num_draft_tokens=model.config.num_draft_tokens, seed=1)
    with pytest.raises(ValueError, match=r"did not keep .*anchor_stride=4"):
        trainer.compute_loss(model, unstrided([row]))
    with pytest.raises(ValueError, match="was built for"):  # the same folder for a layout keeping every position
        FeatureCache(str(tmp_path / "cache"), cache_name(target), model.config.target_layer_ids)
    with pytest.raises(ValueError, match="needs each row's response_start"):
        cache.features(target, ids, batch["attention_mask"])


def cache_name(target):
    return getattr(target.config, "_name_or_path", "") or type(target).__name__


def test_target_distribution_stays_float32_under_bf16_autocast(tiny_setup, tmp_path):
    """--bf16 autocasts the drafter; p^T (the loss's reference) must not be rounded to bfloat16."""
    from dlite_hf.training.data import response_token_counts

    target, dataset = tiny_setup
    model = make_drafter(target, seed=8, draft_vocab_size=40)
    set_draft_vocab(model, response_token_counts(dataset, 128))
    trainer = DLiteTrainer(model=model, target=target, args=_args(tmp_path, "stable"), train_dataset=dataset)
    batch = trainer.data_collator([dataset[i] for i in range(4)])
    reference = trainer._gather_blocks(model, batch, compact=True)["target_log_probs"]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = trainer._gather_blocks(model, batch, compact=True)["target_log_probs"]
    assert mixed.dtype == torch.float32
    torch.testing.assert_close(mixed, reference)


@pytest.mark.parametrize("stage", ["teacher", "stable"])
def test_evaluation_runs_the_stage_loss_and_logs_eval_proxies(tiny_setup, tmp_path, stage):
    target, dataset = tiny_setup
    model = make_drafter(target, seed=9, history_window=-1 if stage == "teacher" else 0)
    args = _args(tmp_path, stage, eval_strategy="steps", eval_steps=2, per_device_eval_batch_size=4)
    trainer = DLiteTrainer(
        model=model,
        target=target,
        args=args,
        train_dataset=dataset,
        eval_dataset=torch.utils.data.Subset(dataset, [0, 1, 2]),
    )
    trainer.train()
    evaluated = [entry for entry in trainer.state.log_history if "eval_loss" in entry]
    assert evaluated and torch.isfinite(torch.tensor(evaluated[-1]["eval_loss"]))
    assert 0.0 <= evaluated[-1]["eval_top1_pos1"] <= 1.0 and evaluated[-1]["eval_expected_tau_greedy"] >= 1.0
    metrics = trainer.evaluate()
    assert metrics["eval_loss"] == pytest.approx(evaluated[-1]["eval_loss"], rel=1e-5)  # same weights, same loss
    trainer.save_model(str(tmp_path / "saved"))
    record = json.loads((tmp_path / "saved" / "dlite_training.json").read_text())
    assert record["epochs"] == pytest.approx(2 * 4 / len(dataset), abs=0.01)  # completed epochs, not the default 3
    assert record["eval_expected_tau_greedy_last_logged"] == pytest.approx(
        metrics["eval_expected_tau_greedy"], abs=1e-3
    )
    assert record["train_expected_tau_greedy_last_logged"] >= 1.0


def test_logged_proxies_are_averaged_over_every_rank(tiny_setup, tmp_path, monkeypatch):
    """In a data-parallel run each rank records its own batches; the logged acceptance proxies are the mean over
    all ranks' records (a fixed-order all-reduce of sums and counts), not the logging rank's own."""
    import transformers
    from transformers import TrainingArguments

    target, dataset = tiny_setup
    drafter = make_drafter(target, seed=0)
    trainer = DLiteTrainer(model=drafter, target=target, args=_args(tmp_path, "stable"), train_dataset=dataset)
    trainer._metrics["train"]["top1_pos1"] += [0.2, 0.4]  # this rank: mean 0.3 over two records
    names = trainer._metric_names()
    other_rank = torch.zeros(len(names), 2, dtype=torch.float64)
    other_rank[names.index("top1_pos1")] = torch.tensor([0.9 * 4, 4.0])  # another rank: four records, mean 0.9
    other_rank[names.index("accept_pos2")] = torch.tensor([0.5, 1.0])  # a proxy only the other rank recorded

    def all_reduce(tensor):
        tensor += other_rank

    logged = {}
    monkeypatch.setattr(TrainingArguments, "world_size", property(lambda self: 2))
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_backend", lambda: "gloo")
    monkeypatch.setattr(torch.distributed, "all_reduce", all_reduce)
    monkeypatch.setattr(transformers.Trainer, "log", lambda self, logs, *a, **k: logged.update(logs))
    trainer.log({"loss": 1.0})
    assert logged["top1_pos1"] == pytest.approx((0.2 + 0.4 + 0.9 * 4) / 6)
    assert logged["accept_pos2"] == pytest.approx(0.5) and "top1_pos3" not in logged
    assert not trainer._metrics["train"]


def test_a_target_placed_by_device_map_is_left_where_it_is(tiny_setup, tmp_path):
    """`train --target_device_map auto` loads the target with accelerate's dispatch (a big target over several
    devices); the trainer must not move it back onto one device. A target without a device map is moved."""
    from accelerate import dispatch_model
    from transformers import AutoModelForCausalLM

    target, dataset = tiny_setup
    target.save_pretrained(tmp_path / "target")
    # what from_pretrained(device_map=...) does when the map spans devices: accelerate's dispatch, which records it
    placed = dispatch_model(AutoModelForCausalLM.from_pretrained(tmp_path / "target"), device_map={"": "cpu"})
    assert placed.hf_device_map == {"": "cpu"}

    def refuse(*args, **kwargs):
        raise AssertionError("the trainer moved a target that accelerate had placed")

    placed.to = refuse
    trainer = DLiteTrainer(
        model=make_drafter(placed, seed=0), target=placed, args=_args(tmp_path, "stable"), train_dataset=dataset
    )
    assert trainer.target is placed
    trainer.train()  # and training runs on it


@pytest.mark.parametrize("stage", ["teacher", "warmup"])
def test_history_stages_read_a_feature_cache_beside_a_bfloat16_target(tiny_setup, tmp_path, stage):
    """The cache returns float32 states; the full-vocabulary p^T of the teacher and warm-up stages goes through a
    bfloat16 target's lm_head all the same (it raised a dtype mismatch), with the same loss written and read."""
    import copy

    target, dataset = tiny_setup
    target = copy.deepcopy(target).to(torch.bfloat16)
    model = make_drafter(target, seed=1, history_window=-1 if stage == "teacher" else 0)
    teacher = make_drafter(target, seed=2, history_window=-1) if stage == "warmup" else None
    args = _args(tmp_path, stage, feature_cache_dir=str(tmp_path / "cache"))
    trainer = DLiteTrainer(model=model, target=target, args=args, train_dataset=dataset, teacher=teacher)
    assert not trainer.feature_cache.history_free
    batch = trainer.data_collator([dataset[i] for i in range(4)])
    with torch.no_grad():
        written, read = (trainer.compute_loss(model, batch) for _ in range(2))
    assert torch.isfinite(written) and torch.equal(written, read)
