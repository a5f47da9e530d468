"""`dlite-hf train` in process: the no-head ablation starts from the same weights as the drafter it ablates."""

from __future__ import annotations

import torch
from conftest import write_tiny_training_run

from dlite_hf import DLiteForSpeculation
from dlite_hf.cli import run_train


def test_no_sequential_head_from_an_init_keeps_every_other_weight(tmp_path, smollm2_dir):
    base = write_tiny_training_run(tmp_path, smollm2_dir)[1:]  # run_train takes the arguments after "train"
    run_train(base + ["--output_dir", str(tmp_path / "with_head"), "--max_steps", "1"])
    with_head = DLiteForSpeculation.from_pretrained(tmp_path / "with_head")
    assert with_head.head is not None
    # zero steps: the ablation is the init minus its head, bit for bit
    run_train(
        base
        + ["--output_dir", str(tmp_path / "nohead"), "--max_steps", "0", "--init", str(tmp_path / "with_head")]
        + ["--no_sequential_head", "--learning_rate", "0"]
    )
    ablated = DLiteForSpeculation.from_pretrained(tmp_path / "nohead")
    assert ablated.head is None and ablated.config.use_sequential_head is False
    reference = {k: v for k, v in with_head.state_dict().items() if not k.startswith("head.")}
    assert reference.keys() == ablated.state_dict().keys()
    assert all(torch.equal(reference[k], v) for k, v in ablated.state_dict().items())
