#!/usr/bin/env bash
# Run the generate()-integration tests against another transformers release, in a venv of its own:
#
#   scripts/test_transformers_release.sh 5.23.0        # builds .venv-transformers-5.23.0 once, then tests
#
# The tests are the ones that exercise the wrapper of transformers' private generation API and everything
# that loads or saves a drafter: generation (greedy identity, stats, refusals), the hybrid, the error paths,
# pass-through of other generation modes, save/load round trips (package and trust_remote_code), the modeling
# and config checks. constraints.txt pins the releases CI installs; this script is how a new one is vetted
# before the pin moves (docs/upstream-protocol.md, "Tested against").
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
