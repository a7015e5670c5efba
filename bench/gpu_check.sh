#!/usr/bin/env bash
# The GPU check, as one script for a machine with CUDA (and specviz's requirements importable):
#
#   bash bench/gpu_check.sh tests        # the engine's tests on CUDA: the tiny pair in fp32
#                                        # (exactness, sampling distributions, trees, the cut head,
#                                        # traces), SPECVIZ_TEST_DEVICE=cuda
#   bash bench/gpu_check.sh costs        # the verify-cost curve of the default pair's shapes on
#                                        # CUDA, bf16 and fp32 (bench/shape_costs.py: random weights,
#                                        # for a machine that cannot hold the pair's files)
#   bash bench/gpu_check.sh graphs       # the one-token pass eager against compiled (static caches,
#                                        # CUDA graphs: specviz/models/static_kv.py), bf16, and the c
#                                        # it gives; then the compiled runs' exactness on CUDA
#   bash bench/gpu_check.sh bench DIR    # the chain-against-tree table (bench.py --trees) on CUDA
#                                        # in bf16, the default pair read from the two GGUF files
#                                        # in DIR (checked against docs/design.md's sha256 first)
#
# The int8 draft is CPU only (specviz/models/int8.py), so the GPU table has the bf16 draft alone.
# Logs go to $OUT (or /tmp/gpu_check).
set -uo pipefail
out=${OUT:-/tmp/gpu_check}
mkdir -p "$out"
py=${PYTHON:-python3}
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1

case ${1:-tests} in
tests)
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
    $py -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda,
torch.cuda.get_device_name(), 'transformers', transformers.__version__)" | tee -a "$out/gpu.txt"
    SPECVIZ_TEST_DEVICE=cuda $py -m pytest -q -p no:xdist --timeout 300 --durations 5 \
        tests/test_exactness.py tests/test_sampling.py tests/test_tree.py tests/test_draft_head.py \
        tests/test_trace.py tests/test_quant.py tests/test_compiled.py 2>&1 | tee "$out/tests.log"
    ;;
graphs)
    $py bench/shape_costs.py --device cuda --dtype bfloat16 --compiled 2>&1 | grep -v "Loading weights" \
        | tee "$out/graphs.log"
    ;;
costs)
    for dt in bfloat16 float32; do
        $py bench/shape_costs.py --device cuda --dtype $dt 2>&1 | grep -v "Loading weights" | tee "$out/costs-$dt.log"
    done
    ;;
bench)
    dir=${2:?give the folder that holds the two GGUF files of the default pair}
    draft=$dir/Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf
    target=$dir/Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf
    sums="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32  $draft
cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046  $target"
    echo "$sums" | sha256sum -c --quiet - || { echo "the GGUF files in $dir are not the default pair's"; exit 1; }
    $py bench/bench.py --draft "$draft" --target "$target" --device cuda --dtype bfloat16 --trees \
        --prompts ${PROMPTS:-code code-hard prose} --gammas ${GAMMAS:-2 4 6 8} --repeats ${REPEATS:-3} \
        2>&1 | tee "$out/trees.log"
    ;;
*)
    echo "usage: bash bench/gpu_check.sh tests | costs | graphs | bench DIR" >&2
    exit 2
    ;;
esac
