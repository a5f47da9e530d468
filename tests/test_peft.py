"""PEFT: a LoRA-wrapped target trains and generates; a drafter adapted with LoRA saves and loads back."""

from __future__ import annotations

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from tiny_models import make_drafter, make_tiny_target

from dlite_hf.training.arguments import DLiteTrainingArguments
from dlite_hf.training.data import RegeneratedDataset
from dlite_hf.training.trainer import DLiteTrainer


def _dataset(target):
    prompts = torch.randint(1, 128, (8, 6), generator=torch.Generator().manual_seed(0))
    sequences = target.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=16, do_sample=False)
    return RegeneratedDataset([{"input_ids": s.tolist(), "loss_mask": [0] * 6 + [1] * 16} for s in sequences])


def _args(tmp_path, **overrides):
    kwargs = dict(
        output_dir=str(tmp_path / "run"),
        stage="stable",
        max_steps=2,
        per_device_train_batch_size=4,
        num_anchors=2,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        learning_rate=1e-2,
    )
    kwargs.update(overrides)
    return DLiteTrainingArguments(**kwargs)


def test_lora_target_generates_losslessly_and_trains(tmp_path):
    base = make_tiny_target("llama", seed=1)
    torch.manual_seed(2)
    target = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    target.eval()
    drafter = make_drafter(base, seed=3)
    ids = torch.randint(1, 128, (1, 7), generator=torch.Generator().manual_seed(4))
    plain = target.generate(input_ids=ids, max_new_tokens=16, do_sample=False)
    with target.disable_adapter():
        without_adapter = target.generate(input_ids=ids, max_new_tokens=16, do_sample=False)
    assert not torch.equal(plain, without_adapter)  # the adapter really changes the target
    assisted = target.generate(input_ids=ids, max_new_tokens=16, do_sample=False, assistant_model=drafter)
    assert torch.equal(plain, assisted)
    trainer = DLiteTrainer(model=drafter, target=target, args=_args(tmp_path), train_dataset=_dataset(base))
    trainer.train()
    assert trainer.state.global_step == 2


def test_drafter_lora_adapter_saves_and_loads_back(tmp_path):
    target = make_tiny_target("qwen3", seed=5)
    base_drafter = make_drafter(target, seed=6)
    base_drafter.save_pretrained(tmp_path / "released")
    lora = get_peft_model(base_drafter, LoraConfig(r=4, target_modules=["q_proj", "v_proj", "up_proj"]))
    trainable = {n for n, p in lora.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    trainer = DLiteTrainer(model=lora, target=target, args=_args(tmp_path, lora=True), train_dataset=_dataset(target))
    trainer.train()
    lora.save_pretrained(tmp_path / "adapter")
    context = torch.randn(2, base_drafter.config.num_tapped_layers, 64)
    anchors = torch.tensor([3, 9])
    adapted_tokens, adapted_logits = lora.get_base_model().bind_target(target).draft(context, anchors)

    from dlite_hf import DLiteForSpeculation

    reloaded = DLiteForSpeculation.from_pretrained(tmp_path / "released")
    plain_logits = reloaded.bind_target(target).draft(context, anchors)[1]
    restored = PeftModel.from_pretrained(reloaded, tmp_path / "adapter").eval()
    tokens, logits = restored.get_base_model().bind_target(target).draft(context, anchors)
    assert torch.allclose(logits, adapted_logits, atol=1e-5) and torch.equal(tokens, adapted_tokens)
    assert not torch.allclose(plain_logits, adapted_logits, atol=1e-3)  # the adapter learned something
    ids = torch.randint(1, 128, (1, 5), generator=torch.Generator().manual_seed(7))
    plain = target.generate(ids, max_new_tokens=12, do_sample=False)
    assert torch.equal(plain, target.generate(ids, max_new_tokens=12, do_sample=False, assistant_model=restored))
