#!/usr/bin/env bash
# Run the tests of the generate() integration and of drafter loading/saving against another transformers release,
# in a venv of its own: how a new release is vetted before constraints.txt's pin moves (docs/upstream-protocol.md).
#   scripts/test_transformers_release.sh 5.23.0        # builds .venv-transformers-5.23.0 once, then tests
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${1:?usage: scripts/test_transformers_release.sh TRANSFORMERS_VERSION}
VENV=.venv-transformers-$VERSION
if [[ ! -x $VENV/bin/python ]]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q torch==2.13.0 "transformers==$VERSION"
    # the package and its test dependencies, with transformers held at VERSION (not constraints.txt's pin)
    "$VENV/bin/pip" install -q -e ".[dev]" "transformers==$VERSION" "torch==2.13.0"
fi
"$VENV/bin/python" -c "import transformers; print('transformers', transformers.__version__)"
"$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/generate/test_refusals.py \
    tests/test_checkpoint_errors.py tests/generate/test_hook_guard.py tests/generate/test_integration.py \
    tests/generate/test_passthrough.py tests/generate/test_greedy.py tests/generate/test_hybrid.py \
    tests/test_suffix_index.py tests/test_roundtrip.py tests/test_modeling.py tests/generate/test_decoding_options.py
