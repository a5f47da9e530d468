# Sourced by scripts/gpu_burst.sh and scripts/gpu_study.sh (set phase, W and OUT first): the work folder outside the
# checkout, the package laid out as installed (modeling/ as dlite_hf.modeling), the GGUF's path, a timestamped log
# line, `last_checkpoint`, and the env phase both share.
mkdir -p "$W" "$OUT"
export DLITE_HF_CACHE=$W/cache PYTHONPATH=$W/pkg:$W/site PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
rm -rf "$W/pkg" && mkdir -p "$W/pkg" && cp -r src/dlite_hf "$W/pkg/" && cp -r modeling "$W/pkg/dlite_hf/modeling"
DLITE=(python3 -m dlite_hf.cli)
GGUF=$W/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
T0=${T0:-$(date +%s)}
stamp() { echo "[$(($(date +%s) - T0)) s] $*"; }

# last_checkpoint DIR: DIR when training finished there, else its newest checkpoint-N (empty when none)
last_checkpoint() {
  if [ -f "$1/model.safetensors" ]; then echo "$1"; else ls -d "$1"/checkpoint-* 2>/dev/null | sort -t- -k2 -n | tail -1 || true; fi
}

# the env phase: the GPU, the wheels (WHEELS_GLOB or WHEELS, default .gpu_a/*.whl) installed into $W/site, GGUF part 1
# put aside, the versions that import
if [ "$phase" = env ]; then
  if command -v nvidia-smi > /dev/null; then nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true; fi
  # shellcheck disable=SC2086
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$W/site" \
    ${WHEELS_GLOB:-${WHEELS:-.gpu_a/*.whl}}
  mkdir -p "$W/gguf" && cp .gpu_a/gguf.part* "$W/gguf/"
  python3 -c "import torch, transformers, gguf, regex, tokenizers, accelerate as a
print('torch', torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU', 'transformers', transformers.__version__,
      'tokenizers', tokenizers.__version__, 'accelerate', a.__version__)
import dlite_hf, dlite_hf.training.trainer; print('dlite_hf', dlite_hf.__version__)"
  nproc
  exit 0
fi
