#!/usr/bin/env bash
# The GPU lane of issue 22, on a fresh GPU machine (torch and transformers in its image, no internet), from the
# repository root, with the wheels of benchmarks/gpu_wheels.sh in gpu_wheels/ (or $GPU_WHEELS). Results go to $OUT
# (default /tmp/gpu-out), at most 8 files per part, so that a device call brings them back.
#
#     benchmarks/gpu_session.sh [PART]
#
#   lane     install, build the fixtures, the `gpu` tests, bench_sample (0.5B: 2 x 8 x 128, as the issue), bench_snapshot
#            (7B shape, bf16: clone against fingerprints)                                      about 6 min on an H100
#   memory   bench_gpu_memory for the 0.5B and 1.5B shapes (17 real GRPO steps)              about 6 min
#   memory7b bench_gpu_memory for the 7B shape (8 cases; those whose estimate exceeds the GPU are not run)  about 6 min
#   short    the gpu tests, bench_sample 0.5B and bench_gpu_memory 0.5B: one device call of about 8 minutes, for a
#            session lent 15 minutes of device time
#   verdicts the doctor's verdicts against real launches (issue 63: benchmarks/gpu_verdicts.py): each launch's
#            `trl-doctor check`, then the launch's first steps, into $OUT/gpu-verdicts.json; the legacy launches
#            (trl 0.15.2 + transformers 4.48.3) from gpu_wheels/legacy/ in a folder first on their path. About 8
#            minutes on an H100; VERDICTS_BUDGET (seconds, default 380) is when no further launch starts,
#            VERDICTS_ONLY=NAME,... reruns some, VERDICTS_ARGS passes gpu_verdicts.py's other options
#   all      the three in a row (over one device call's 10 minutes: run the parts as separate calls there)
#
# GPU_TESTS_K=EXPR selects the gpu tests of `short` (pytest -k), for a rerun of the ones that failed.
# Each part installs the wheels when they are not there yet (a warm machine keeps them between calls).
set -uo pipefail
part=${1:-all}
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
wheels=${GPU_WHEELS:-gpu_wheels}
site=/tmp/trl-doctor-site
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export TRL_DOCTOR_TEST_NO_FORKSERVER=1  # every check's worker from scratch: no fork of a process near CUDA
log="$OUT/session-$part.log"

step() { echo "== $(date +%T) $*" | tee -a "$log"; }

install() {
    if [ ! -f "$site/.installed" ]; then
        step "install $(ls "$wheels" | tr '\n' ' ')"
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
            "$wheels"/*.whl >>"$log" 2>&1 || { echo "wheel install failed (see $log)"; exit 1; }
        touch "$site/.installed"
    fi
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PATH="$site/bin:$PATH"
    # -P: the installed trl_doctor (its rules/ mapped into the package), not the bare working tree on the path
    python3 -P -c "import torch, transformers, trl, datasets, trl_doctor; print('torch', torch.__version__, 'cuda', \
torch.cuda.is_available(), 'transformers', transformers.__version__, 'trl', trl.__version__, 'trl-doctor', \
trl_doctor.__version__)" 2>&1 | tee -a "$log"
}

lane() {
    nvidia-smi >>"$log" 2>&1
    step "fixtures"
    python3 -P fixtures/build.py >>"$log" 2>&1
    step "gpu tests"
    python3 -P -m pytest -p no:cacheprovider -m gpu -v tests/test_gpu.py >"$OUT/gpu_tests.log" 2>&1
    tail -3 "$OUT/gpu_tests.log" | tee -a "$log"
    step "bench_sample"
    python3 -P benchmarks/bench_sample.py --shape 0.5b --prompts 2 --generations 8 --tokens 128 --repeat 3 \
        >"$OUT/bench_sample.txt" 2>>"$log"
    python3 -P benchmarks/bench_sample.py --shape 7b --prompts 2 --generations 4 --tokens 256 --repeat 2 \
        >>"$OUT/bench_sample.txt" 2>>"$log"
    cat "$OUT/bench_sample.txt" | tee -a "$log"
    step "bench_snapshot"
    python3 -P benchmarks/bench_snapshot.py --shape 7b --device cuda --dtype bfloat16 >"$OUT/bench_snapshot.txt" 2>>"$log"
    cat "$OUT/bench_snapshot.txt" | tee -a "$log"
}

short() {
    nvidia-smi >>"$log" 2>&1
    step "fixtures"
    python3 -P fixtures/build.py >>"$log" 2>&1
    step "gpu tests"
    python3 -P -m pytest -p no:cacheprovider -m gpu -v -s ${GPU_TESTS_K:+-k "$GPU_TESTS_K"} tests/test_gpu.py \
        >"$OUT/gpu_tests.log" 2>&1
    tail -3 "$OUT/gpu_tests.log" | tee -a "$log"
    step "bench_sample 0.5b"
    python3 -P benchmarks/bench_sample.py --shape 0.5b --prompts 2 --generations 8 --tokens 128 --repeat 3 \
        >"$OUT/bench_sample.txt" 2>>"$log"
    cat "$OUT/bench_sample.txt" | tee -a "$log"
    memory 0.5b small
}

memory() {
    step "bench_gpu_memory $1"
    python3 -P benchmarks/bench_gpu_memory.py --shapes "$1" --timeout 200 --out "$OUT/gpu_memory_$2.md" >>"$log" 2>&1
    cat "$OUT/gpu_memory_$2.md" | tee -a "$log"
}

verdicts() {
    nvidia-smi >>"$log" 2>&1
    legacy=/tmp/trl-doctor-legacy-site
    if [ ! -f "$legacy/.installed" ]; then
        step "install legacy $(ls "$wheels/legacy" | tr '\n' ' ')"
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$legacy" \
            "$wheels"/legacy/*.whl >>"$log" 2>&1 || { echo "legacy wheel install failed (see $log)"; exit 1; }
        touch "$legacy/.installed"
    fi
    step "gpu verdicts"
    python3 -P benchmarks/gpu_verdicts.py --out "$OUT" --work /tmp/gpu-verdicts --budget "${VERDICTS_BUDGET:-380}" \
        --legacy-pythonpath "$legacy" ${VERDICTS_ONLY:+--only "$VERDICTS_ONLY"} ${VERDICTS_ARGS:-} 2>&1 | tee -a "$log"
}

install
case "$part" in
    verdicts) verdicts ;;
    lane) lane ;;
    short) short ;;
    memory) memory 0.5b,1.5b small ;;
    memory7b) memory 7b 7b ;;
    all) lane; memory 0.5b,1.5b small; memory 7b 7b ;;
    *) echo "unknown part $part: lane, short, memory, memory7b, verdicts or all"; exit 2 ;;
esac
step "done"
