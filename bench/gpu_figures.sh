#!/usr/bin/env bash
# Every GPU figure of docs/benchmarks.md (diffusion, issue 34) in one run, under 10 minutes on an H200:
# the diffusers tests on CUDA, then per image size (16, 64, 256) the overhead ratio against the stock pipeline,
# step-level against request-level batching on Poisson arrivals at two loads, and the profile (16 and 256).
#
# Run from the project's root on a machine with a CUDA GPU and torch, transformers, numpy, attrs, pytest and
# hypothesis installed. Where diffusers is missing (no package registry there), its wheels are installed from
# $WHEELS (default .whl) into /tmp/site: diffusers-0.42.1-py3-none-any.whl, importlib_metadata-10.2.0, zipp-4.1.2,
# transitions-0.9.3 (made here with `pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl ...`).
# Outputs: one log per part under $OUT (default out/gpu-figures), the figures' last lines at the end, and with
# ARCHIVE=path.tgz an archive of $OUT rewritten after each part (what finished survives a killed run).
set -u
OUT=${OUT:-out/gpu-figures}
WHEELS=${WHEELS:-.whl}
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
if ! python3 -c 'import diffusers, transitions' 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl \
        || { echo "no diffusers and no wheels in $WHEELS"; exit 1; }
    export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-}
date -u '+%Y-%m-%d %H:%M UTC' | tee "$OUT/date.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$OUT/date.txt"
python3 -c 'import torch, diffusers, transformers; print("torch", torch.__version__, "diffusers", diffusers.__version__,
"transformers", transformers.__version__)' | tee -a "$OUT/date.txt"

part() {  # part NAME SECONDS COMMAND...: run it with a time limit, its output to $OUT/NAME.txt (transformers' notices dropped)
    local name=$1 limit=$2
    shift 2
    if [ -n "${PARTS:-}" ] && [[ " $PARTS " != *" $name "* ]]; then return; fi  # PARTS="tests overhead-16 ...": only those
    echo "== $name: $*"
    local began=$SECONDS
    timeout "$limit" "$@" 2>&1 | grep -v '^\[transformers\]' | tee "$OUT/$name.txt"
    echo "   ($name: $((SECONDS - began)) s)" | tee -a "$OUT/$name.txt"
    if [ -n "${ARCHIVE:-}" ]; then tar czf "$ARCHIVE" -C "$OUT" .; fi
}

part tests 150 python3 -m pytest -o addopts="" -q -p no:randomly -p no:cacheprovider tests/runtimes/diffusers \
    --deselect tests/runtimes/diffusers/test_vllm_ar_stage.py
B="python3 bench/diffusion.py --device cuda --steps 20"
part overhead-16 90 $B --size 16 --batch 64 --repeats 3
part arrivals-16 90 $B --size 16 --batch 64 --repeats 3 --arrivals --requests 256
part overhead-256 120 $B --size 256 --batch 16 --single 4 --repeats 3
part arrivals-256 150 $B --size 256 --batch 16 --repeats 1 --arrivals --requests 48
part overhead-64 90 $B --size 64 --batch 64 --repeats 3
part arrivals-64 90 $B --size 64 --batch 64 --repeats 3 --arrivals --requests 256
part profile-16 90 $B --size 16 --batch 64 --repeats 3 --profile --profile-dir "$OUT/profile"
part profile-256 120 $B --size 256 --batch 16 --repeats 2 --profile --profile-dir "$OUT/profile"
echo "== figures"
grep -h -E '^(diffusion|arrivals):|passed|failed' "$OUT"/*.txt
