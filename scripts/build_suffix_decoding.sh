#!/usr/bin/env bash
# Builds vLLM's suffix decoding for the serving benchmark (method "suffix") without installing arctic-inference
# (whose install would pin an old torch and register its own engine-patching vLLM plugin): fetches its pinned,
# hash-checked sdist, compiles csrc/suffix_decoding alone with nanobind, and lays out
# `arctic_inference/suffix_decoding` under $OUT, outside the work tree (serve_vllm.py finds it on PYTHONPATH).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${VLLM_PYTHON:-.venv-vllm/bin/python}
OUT=${SUFFIX_DECODING_DIR:-$HOME/.cache/dlite-hf/suffix-decoding}
VERSION=0.3.0
SHA256=7f22e3e1b1071c6061c0d6951be17c0fb50b08d06d6e543144c8f52faba60a36
NANOBIND=2.9.2  # the version arctic-inference 0.3.0 builds with
if [ -f "$OUT/arctic_inference/suffix_decoding/.built-$VERSION" ]; then
    echo "suffix decoding $VERSION already built in $OUT"; exit 0
fi
command -v cmake >/dev/null && command -v c++ >/dev/null || {
    echo "build_suffix_decoding.sh needs cmake and a C++20 compiler (apt-get install cmake g++)"; exit 1; }
BUILD=$(mktemp -d)
trap 'rm -rf "$BUILD"' EXIT
"$PY" -m pip download -q --no-deps --no-binary :all: --no-build-isolation "arctic-inference==$VERSION" -d "$BUILD"
echo "$SHA256  $BUILD/arctic_inference-$VERSION.tar.gz" | sha256sum -c --quiet -
tar xzf "$BUILD/arctic_inference-$VERSION.tar.gz" -C "$BUILD"
SRC="$BUILD/arctic_inference-$VERSION"
"$PY" -m pip install -q --target "$BUILD/nanobind" "nanobind==$NANOBIND"
GENERATOR=()
if command -v ninja >/dev/null; then GENERATOR=(-G Ninja); fi
PYTHONPATH="$BUILD/nanobind" cmake -S "$SRC/csrc/suffix_decoding" -B "$BUILD/cmake" ${GENERATOR[@]+"${GENERATOR[@]}"} \
    -DPython_EXECUTABLE="$(readlink -f "$PY")" -DCMAKE_BUILD_TYPE=Release >/dev/null
PYTHONPATH="$BUILD/nanobind" cmake --build "$BUILD/cmake" -j "$(nproc)" >/dev/null
rm -rf "$OUT/arctic_inference"
mkdir -p "$OUT/arctic_inference/suffix_decoding"
echo '"""arctic-inference '"$VERSION"': only its suffix_decoding module, built by scripts/build_suffix_decoding.sh."""' \
    > "$OUT/arctic_inference/__init__.py"
cp "$SRC/LICENSE" "$OUT/arctic_inference/LICENSE"
cp "$SRC/arctic_inference/suffix_decoding/__init__.py" "$SRC/arctic_inference/suffix_decoding/cache.py" \
    "$BUILD"/cmake/_C*.so "$OUT/arctic_inference/suffix_decoding/"
PYTHONPATH="$OUT" "$PY" -c "from arctic_inference.suffix_decoding import SuffixDecodingCache; SuffixDecodingCache(max_tree_depth=8)"
touch "$OUT/arctic_inference/suffix_decoding/.built-$VERSION"
echo "suffix decoding $VERSION built in $OUT"
