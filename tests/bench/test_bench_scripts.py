"""The benchmark modules run end to end on tiny inputs (CI proves they run; the figures come from bench/)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_module, write_jsonl

pytestmark = pytest.mark.slow  # starts processes (servers, Ray, scripts, CLIs): `-m "not slow"` skips it


ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "sample" / "encyclopedia.jsonl"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("bench")
    out = run_module(
        "bench.bench_build",
        "--corpus",
        str(SAMPLE),
        "--out",
        str(work / "idx"),
        "--forward-tokens",
        "3000",
        "--json",
        str(work / "build.json"),
    )
    assert "ratio" in out
    return work


def test_bench_build_figures(built):
    fig = json.loads((built / "build.json").read_text())
    manifest = json.loads((built / "idx" / "manifest.json").read_text())
    assert fig["tokens"] == manifest["counts"]["tokens"] > 0
    assert 0 < fig["seconds_encode"] < fig["build_seconds"]
    # the ratio is encode / build time (the JSON seconds are rounded to 0.1 s, hence the tolerance)
    assert 0 < fig["ratio"] < 1 and fig["ratio"] == pytest.approx(
        fig["seconds_encode"] / fig["build_seconds"], rel=0.05
    )
    assert fig["standalone_forward_tokens"] >= 3000


def test_bench_ready_times_each_part_of_a_start(built):
    out = run_module("bench.bench_ready", "--index", str(built / "idx"))
    *timed, last = out.strip().splitlines()
    from encoder.device import cpu_has_fast_bf16

    # a BERT model is served without transformers, and on a CPU without torch but where its queries run on torch (bf16)
    assert last == f"torch imported: {cpu_has_fast_bf16()}; transformers imported: False"
    names = [line.rsplit(None, 2)[0] for line in timed]
    assert names[-4:] == [names[-4], "load the reader (openvino)", "warm-up fill", "total"]
    assert names[-4].startswith("open the index (")
    assert sum(float(line.split()[-2]) for line in timed[:-1]) > 0


def test_bench_fill_memory_reports_anonymous_memory_after_each_mark(built):
    probes = write_jsonl(
        built / "mem_probes.jsonl",
        [{"query": "Marie Curie was born in <mask> ."}, {"query": "The Seine flows through <mask> ."}],
    )
    out = run_module(
        "bench.bench_fill_memory",
        "--index",
        str(built / "idx"),
        "--probes",
        str(probes),
        "--fills",
        "12",
        "--json",
        str(built / "mem.json"),
    )
    rows = json.loads((built / "mem.json").read_text())["rows"]
    assert [r["fills"] for r in rows] == [0, 1, 10, 12]
    assert all(r["anon_mb"] > 0 for r in rows) and rows[-1]["seconds"] > 0
    assert f"growth over 12 fills: {rows[-1]['anon_mb'] - rows[0]['anon_mb']:.1f} MB" in out
    run_module(
        "bench.bench_fill_memory",
        "--index",
        str(built / "idx"),
        "--probes",
        str(probes),
        "--fills",
        "2",
        "--pad",
        "none",
        "--ov-cache-capacity",
        "0",
        "--json",
        str(built / "mem_none.json"),
    )
    assert json.loads((built / "mem_none.json").read_text())["pad"] == "none"


def test_bench_disk_counts_every_file(built):
    run_module("bench.bench_disk", "--index", str(built / "idx"), "--json", str(built / "disk.json"))
    fig = json.loads((built / "disk.json").read_text())
    files = sum(p.stat().st_size for p in (built / "idx").rglob("*") if p.is_file())
    assert fig["bytes"] == files and fig["bytes_per_token"] == pytest.approx(files / fig["tokens"])


def test_bench_ann_flat_agrees_with_exact(built):
    run_module(
        "bench.bench_ann",
        "--index",
        str(built / "idx"),
        "--corpus",
        str(SAMPLE),
        "--probes",
        "6",
        "--k",
        "64",
        "--types",
        "built;IVF8,Flat",
        "--refine",
        "1,2",
        "--aggregates",
        "max,sum",
        "--json",
        str(built / "ann.json"),
    )
    fig = json.loads((built / "ann.json").read_text())
    flat = fig["types"]["built (Flat)"]  # the sample is one small shard: exact Flat, nothing to refine
    assert flat["recall_at_k_start"] > 0.9 and flat["recall_at_k_end"] > 0.9
    assert set(fig["types"]) == {"built (Flat)", "IVF8,Flat (IVF8,Flat) refine 1", "IVF8,Flat (IVF8,Flat) refine 2"}
    for agg in ("max", "sum"):
        for refine in (1, 2):
            assert 0.0 <= fig["types"][f"IVF8,Flat (IVF8,Flat) refine {refine}"][f"agreement_top1_{agg}"] <= 1.0


def test_compare_fill_stages_times_every_stage_of_this_tree(built):
    out = run_module(
        "bench.compare_fill_stages",
        "--tree",
        str(ROOT),
        "--index",
        str(built / "idx"),
        "--corpus",
        str(SAMPLE),
        "--n",
        "4",
    )
    tree, figures = out.strip().split(" ", 1)
    stages = json.loads(figures)
    assert Path(tree) == ROOT and set(stages) == {"hybrid", "dense", "dense_alpha"}
    for s in stages.values():
        assert set(s) - {"read"} == {"encode", "search", "spans", "rank", "sum"} and min(s.values()) >= 0
        assert s["sum"] >= max(v for k, v in s.items() if k != "sum")  # the median of the sums


def test_bench_service_measures_a_real_server(built, tmp_path):
    small = write_jsonl(
        tmp_path / "small.jsonl", [{"id": "a", "title": "A", "text": "Paris is the capital of France."}]
    )
    subprocess.run(
        [sys.executable, "-m", "indexer", "build", "--corpus", str(small), "--out", str(tmp_path / "base")],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=600,
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run_module(
        "bench.bench_service",
        "--index",
        str(built / "idx"),
        "--corpus",
        str(SAMPLE),
        "--baseline-index",
        str(tmp_path / "base"),
        "--probes",
        "5",
        "--starts",
        "1",
        "--port",
        str(port),
        "--json",
        str(tmp_path / "s.json"),
    )
    fig = json.loads((tmp_path / "s.json").read_text())
    assert fig["probes"] == 5 and 0 < fig["fill_ms_p50"] <= fig["fill_ms_p99"]
    assert set(fig["stage_ms_mean"]) == {"encode", "search", "spans", "rank", "read"}
    assert sum(fig["stage_ms_mean"].values()) <= fig["fill_ms_mean"]  # the client's wall time holds every stage
    assert len(fig["ready_seconds"]) == 1 and fig["ready_seconds"][0] > 0
    assert fig["rss_after_probes"]["VmRSS"] > fig["rss_baseline"]["VmRSS"] * 0.5
    assert len(fig["forward_floor_ms"]) == 2 and all(ms > 0 for ms in fig["forward_floor_ms"])
    p50, p99 = fig["fill_over_forward"]
    assert 0 < p50 <= p99 and p50 == pytest.approx(fig["fill_ms_p50"] / (sum(fig["forward_floor_ms"]) / 2), rel=0.02)


def test_compare_predictions(tmp_path):
    def rows(tops):
        return [
            {"query": f"q{i} <mask>", "predictions": [t] if t else [], "em": t == "Paris"} for i, t in enumerate(tops)
        ]

    a = write_jsonl(tmp_path / "a.jsonl", rows(["Paris", "London", "Rome", ""]))
    b = write_jsonl(tmp_path / "b.jsonl", rows(["Paris", "Berlin", "Rome", ""]))
    assert "top-1 agreement 3/4 = 75.0%; EM@1 1 vs 1 probes" in run_module("bench.compare_predictions", str(a), str(b))
    c = write_jsonl(tmp_path / "c2.jsonl", rows(["Paris", "Paris", "Paris", ""]))  # +2 of 4 probes right
    assert "paired micro EM diff +50.0 (SE 28.9)" in run_module("bench.compare_predictions", str(a), str(c))
    other = write_jsonl(tmp_path / "c.jsonl", rows(["Paris"]))
    done = subprocess.run(
        [sys.executable, "-m", "bench.compare_predictions", str(a), str(other)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and "different probes" in done.stderr

    def labels(got):
        return [{"text": f"t{i}", "label": "pos", "predicted": g, "correct": g == "pos"} for i, g in enumerate(got)]

    d = write_jsonl(tmp_path / "d.jsonl", labels(["pos", "neg", "neg", None]))
    e = write_jsonl(tmp_path / "e.jsonl", labels(["pos", "pos", "neg", "pos"]))  # fill-eval --task classify rows
    assert "top-1 agreement 2/4 = 50.0%; EM@1 1 vs 3 probes; paired micro EM diff +50.0 (SE 28.9)" in run_module(
        "bench.compare_predictions", str(d), str(e)
    )


def test_bench_encode_reports_each_budget():
    out = run_module("bench.bench_encode", "--corpus", str(SAMPLE), "--tokens", "2000", "--batch-tokens", "256,1024")
    assert "block length median" in out
    assert "batch    256 tokens:" in out and "batch   1024 tokens:" in out


def test_probes_script_writes_cloze_probes_whose_answer_restores_the_text(tmp_path):
    out = tmp_path / "cloze.jsonl"
    assert "20 cloze probes" in run_module("bench.probes", "--corpus", str(SAMPLE), "--n", "20", "--out", str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    texts = [json.loads(line)["text"] for line in SAMPLE.read_text().splitlines()]
    assert len(rows) == 20 and not (tmp_path / "cloze.jsonl.tmp").exists()
    for row in rows:
        assert row["relation"] == "cloze" and row["query"].count("<mask>") == 1 and len(row["answers"]) == 1
        restored = row["query"].replace("<mask>", row["answers"][0])
        assert any(restored in " ".join(t.split()) for t in texts)  # the window is a real passage of the corpus


def test_bench_classify_scores_a_set_through_the_api(tmp_path, tiny_index):
    data = tmp_path / "set.jsonl"
    data.write_text(
        "".join(
            json.dumps({"text": t, "label": lab}) + "\n"
            for t, lab in (
                ("Marie Curie was born in Warsaw in 1867.", "Poland"),
                ("The Seine flows through Paris.", "France"),
            )
        )
    )
    out = tmp_path / "report.json"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    printed = run_module(
        "bench.bench_classify",
        "--index",
        str(tiny_index),
        "--set",
        str(data),
        "--template",
        "{text} This is about <mask> .",
        "--choice",
        "Poland=Warsaw",
        "--choice",
        "France=Paris,France",
        "--latency",
        "3",
        "--port",
        str(port),
        "--json",
        str(out),
    )
    report = json.loads(out.read_text())
    rep = report["sets"]["set.jsonl"]
    assert rep["examples"] == 2 and 0 <= rep["accuracy"] <= 100 and rep["majority"] == 50.0
    assert f"accuracy {rep['accuracy']:.1f}" in printed
    assert report["latency_ms"]["score"]["p50"] > 0 and report["latency_ms"]["ratio_p50"] > 0


def test_bench_updates_times_updates_deltas_and_compaction(built, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run_module(
        "bench.bench_updates",
        "--index",
        str(built / "idx"),
        "--corpus",
        str(SAMPLE),
        "--work",
        str(tmp_path / "w"),
        "--sizes",
        "1,5",
        "--repeat",
        "2",
        "--clients",
        "2",
        "--steady",
        "2",
        "--single",
        "5",
        "--many",
        "12",
        "--settle",
        "0",
        "--port",
        str(port),
        "--json",
        str(tmp_path / "updates.json"),
    )
    fig = json.loads((tmp_path / "updates.json").read_text())
    assert [u["documents"] for u in fig["updates"]] == [1, 5] and all(u["all_right"] for u in fig["updates"])
    assert all(u["load_during_posts"]["failed"] == 0 and u["steady_before"]["p50_ms"] for u in fig["updates"])
    assert fig["steady"]["failed"] == 0
    assert sorted(fig["deltas"], key=int) == ["0", "4", "10", "12"] and fig["delete"]["fact_gone"]
    assert "shards -> 1" in fig["compact"]["summary"] and fig["compact"]["after"]["p50_ms"] > 0


def test_bench_ray_times_the_local_engine_and_shard_groups_with_hops(built, tmp_path):
    pytest.importorskip("ray")
    out = run_module(
        "bench.bench_ray",
        "--index",
        str(built / "idx"),
        "--corpus",
        str(SAMPLE),
        "--groups",
        "1,2",
        "--delays",
        "0,2",
        "--n",
        "12",
        "--json",
        str(tmp_path / "ray.json"),
    )
    runs = json.loads((tmp_path / "ray.json").read_text())["runs"]
    assert [(r["config"], r["delay_ms"]) for r in runs] == [
        ("local", 0),
        ("ray", 0),
        ("ray", 2),
        ("ray", 0),
        ("ray", 2),
    ]
    assert all(r["p50_ms"] > 0 and r["fills_per_s"] > 0 for r in runs) and "p50 - local" in out
    assert all(r["stage_p50_ms"]["encode"] > 0 and r["stage_p50_ms"]["search"] > 0 for r in runs)
    assert runs[0]["stage_p50_ms"]["spans"] > 0  # on Ray the spans come with the search
    for r in runs[1:]:  # a (hybrid) fill is one round: each group searches and forms its candidates in one call
        assert set(r["calls"]) == {"search_forming"} and r["calls"]["search_forming"]["per_fill"] == 1.0
        if r["delay_ms"]:  # each call sleeps 2 ms before and after its work, a bare one too
            assert all(c["median_ms"] >= 4.0 for c in r["calls"].values()) and r["bare_call_ms"] >= 4.0


def test_reading_accuracy_counts_right_fills_among_the_read_probes(tmp_path):
    read = write_jsonl(
        tmp_path / "read.jsonl", [{"query": "a <mask> .", "answers": ["x"]}, {"query": "b <mask> .", "answers": ["y"]}]
    )
    predictions = write_jsonl(
        tmp_path / "pred.jsonl",
        [
            {"query": "a <mask> .", "answers": ["x"], "predictions": ["X", "z"]},  # read, right (normalized)
            {"query": "b <mask> .", "answers": ["y"], "predictions": ["z"]},  # read, wrong
            {"query": "c <mask> .", "answers": ["w"], "predictions": ["w"]},  # not read, right
            {"query": "d <mask> .", "answers": ["v"], "predictions": []},  # not read, abstained
        ],
    )
    out = json.loads(run_module("bench.reading_accuracy", "--read", str(read), "--predictions", str(predictions)))
    assert out["probes"] == 4 and out["answer_read"] == 50.0 and out["em@1"] == 50.0 and out["reading_accuracy"] == 50.0


def test_engine_speed_times_each_engine_against_torch():
    out = run_module("bench.engine_speed", "--engines", "openvino", "--rounds", "1", "--repeat", "1")
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith(("torch ", "openvino "))}
    assert set(rows) == {"torch", "openvino"}
    assert rows["torch"].count("(1.00x)") == 3  # the reference's ratio to itself, for the three passes


def test_bench_reader_steps_compares_plain_and_bucketed_batches(tmp_path, tiny_bert_dir):
    import numpy as np

    rng = np.random.default_rng(0)
    rows = [
        {
            "query_ids": [101, 2000, 103, 103, 102],
            "mask_at": 2,
            "windows": [rng.integers(2000, 3000, n).tolist()],
            "flags": [[3] * int(n)],
            "gold": [[0, 0, 0]],
        }
        for n in rng.integers(2, 60, size=64)
    ]
    out = run_module(
        "bench.bench_reader_steps",
        "--examples",
        str(write_jsonl(tmp_path / "ex.jsonl", rows)),
        "--init",
        str(tiny_bert_dir),
        "--steps",
        "2",
        "--rounds",
        "1",
    )
    plain, bucketed = (float(line.split("length ")[1].split(",")[0]) for line in out.splitlines())
    assert bucketed < plain  # similar lengths in a batch: less padding


def test_check_reader_sample_finds_every_fill_of_the_bundled_reader_right(tmp_path):
    out = run_module("bench.check_reader_sample", "--work", str(tmp_path))
    assert out.strip().splitlines()[-1] == "wrong: 0 of 36"
    # the known misreads (bench/check_reader_sample.py KNOWN_MISREADS; none since encoder r17) are still wrong: a
    # fixed one leaves the list
    assert out.strip().splitlines()[-2] == "known: 0 of 0"
    assert sum(line.startswith("ok ") for line in out.splitlines()) == 36


def test_bench_codecs_reports_each_codec_against_the_stored_vectors(built, tmp_path):
    probes = tmp_path / "cloze.jsonl"
    run_module("bench.probes", "--corpus", str(SAMPLE), "--n", "12", "--out", str(probes))
    out = run_module(
        "bench.bench_codecs",
        "--index",
        str(built / "idx"),
        "--probes",
        str(probes),
        "--mode",
        "dense",
        "--no-reader",
        "--codec",
        "SQ8",
        "--codec",
        "PQ4",
        "--sample",
        "4000",
        "--json",
        str(tmp_path / "c.json"),
    )
    rows = {r["codec"]: r for r in json.loads((tmp_path / "c.json").read_text())}
    assert "| SQ8 | 384 |" in out and rows["PQ4"]["bytes"] == 4
    base = rows.pop(next(k for k in rows if k.startswith("stored")))
    assert base["agreement"] == 100.0 and base["bytes"] in (386, 768)
    assert rows["SQ8"]["rel_mse"] < 0.001 < rows["PQ4"]["rel_mse"] < 1.0  # 8 bits per dimension vs 4 bytes a vector
    assert rows["SQ8"]["agreement"] >= rows["PQ4"]["agreement"] and rows["SQ8"]["agreement"] >= 75
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.bench_codecs",
            "--index",
            str(built / "idx"),
            "--probes",
            str(probes),
            "--codec",
            "PQ7x3y",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert bad.returncode != 0 and "'PQ7x3y' is not a FAISS factory string" in bad.stderr


def test_check_reader_sample_builds_a_candidate_encoders_own_indexes(tmp_path, tiny_bert_dir):
    from transformers import AutoTokenizer, BertConfig, BertModel

    model = tmp_path / "models" / "candidate"  # a tiny BERT that takes the sample's 256-token blocks
    BertModel(
        BertConfig(
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=512,
        )
    ).save_pretrained(model)
    AutoTokenizer.from_pretrained(str(tiny_bert_dir)).save_pretrained(model)
    work = tmp_path / "work"
    done = subprocess.run(
        [sys.executable, "-m", "bench.check_reader_sample", "--work", str(work), "--model", str(model)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.stdout.strip().endswith("of 36"), done.stderr[-2000:]  # 3 modes x 12 checks, none known wrong
    assert done.returncode == (0 if done.stdout.strip().endswith("wrong: 0 of 36") else 1)  # an untrained model errs
    manifest = json.loads((work / "candidate" / "idx_sample" / "manifest.json").read_text())
    assert manifest["dim"] == 32 and not (work / "idx_sample").exists()


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "bench").glob("*.sh")))
def test_bench_shell_scripts_parse(script):
    """`bash -n`: every shell driver of bench/ parses (they run for hours: a typo found there costs the run)."""
    done = subprocess.run(["bash", "-n", str(ROOT / "bench" / script)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


def test_snapshot_fills_takes_fills_and_scores_and_compare_finds_a_changed_one(built, tmp_path):
    snap = tmp_path / "a.jsonl"
    out = run_module(
        "bench.snapshot_fills",
        "take",
        "--index",
        str(built / "idx"),
        "--corpus",
        str(SAMPLE),
        "--n",
        "3",
        "--variants",
        "1",
        "--scores",
        "2",
        "--modes",
        "dense",
        "restricted",
        "--out",
        str(snap),
    )
    assert "3 probes x 2 modes, +1 x 2 with the variant options, 2 x 2 x 2 closed-set scores" in out
    rows = [json.loads(line) for line in snap.read_text().splitlines()]
    scores = [r for r in rows if "filled" not in r]
    assert [r["options"] for r in scores].count("score-variant") == 4 and all(
        "predicted" in r["masks"][0] for r in scores
    )
    same = run_module("bench.snapshot_fills", "compare", str(snap), str(snap))
    assert "restricted score-variant    2 probes: top-1 agreement 2/2; equal field for field 2" in same
    changed = rows[-1]
    changed["masks"][0]["predicted"] = "nothing"
    other = write_jsonl(tmp_path / "b.jsonl", rows[:-1] + [changed])
    done = subprocess.run(
        [sys.executable, "-m", "bench.snapshot_fills", "compare", str(snap), str(other)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and "top-1 agreement 1/2; equal field for field 1" in done.stdout


def test_batch_agreement_finds_batched_fills_equal_to_single_ones(built):
    from bench.batch_agreement import TOLERANCE

    out = run_module(
        "bench.batch_agreement", "--index", str(built / "idx"), "--corpus", str(SAMPLE), "--probes", "6", "--batch", "4"
    )
    # FillEngine.batch, as the server's batcher runs concurrent requests, answers as the fills made alone,
    # within the stated tolerance: in bf16 a batch's padded shape may change the encoder's rounding (on AMX CPUs
    # 4 of 12 stayed equal field for field), never a top fill
    found = re.fullmatch(
        rf"12 requests in batches of 4: equal field for field (\d+), equal within {re.escape(str(TOLERANCE))} (\d+), "
        r"same filled text \(top-1\) (\d+); largest score / confidence difference (\S+)",
        out.strip(),
    )
    assert found, out
    within, top1, largest = int(found[2]), int(found[3]), float(found[4])
    assert within == top1 == 12 and largest <= TOLERANCE, out


def test_bench_batch_times_run_batch_and_its_batched_stage_per_size(built):
    out = run_module(
        "bench.bench_batch",
        "--index",
        str(built / "idx"),
        "--corpus",
        str(SAMPLE),
        "--probes",
        "8",
        "--batches",
        "1,4",
        "--repeats",
        "1",
    )
    rows = [line for line in out.splitlines() if line.startswith("batch ")]
    assert [line.split(":")[0] for line in rows] == ["batch   1", "batch   4"]
    for line in rows:
        figures = [float(x) for x in re.findall(r"(\d+\.\d+)", line)]
        run, run_x, stage, encode, search, stage_x = figures
        assert run >= stage > 0 and stage == pytest.approx(encode + search, abs=0.02) and run_x > 0 and stage_x > 0
    assert rows[0].count("1.00x batch 1") == 2  # batches of 1 against themselves


def test_bench_bm25_times_maxscore_against_every_posting_with_the_same_answers(built):
    out = run_module("bench.bench_bm25", "--index", str(built / "idx"), "--corpus", str(SAMPLE), "--probes", "8")
    assert re.search(r"round 2: maxscore \d+\.\d ms a query, every posting \d+\.\d", out)
    assert "the same blocks and scores: 8 of 8" in out


def test_bench_search_compares_each_search_with_its_reference_and_reads_recall_by_nprobe(built):
    out = run_module(
        "bench.bench_search",
        "--index",
        str(built / "idx"),
        "--corpus",
        str(SAMPLE),
        "--probes",
        "4",
        "--nprobes",
        "1,4",
    )
    assert re.search(r"BM25 top 100, 8 queries: identical blocks and scores 8/8", out)
    assert re.search(r"search_scored, 4 queries: identical hits 4/4; every shard asked for all p50 \d+\.\d+ ms", out)
    recall = [float(x) for x in re.findall(r"recall@1024 against nprobe 4: (\d\.\d+)", out)]
    assert len(recall) == 2 and recall[1] == 1.0 and 0 < recall[0] <= 1.0  # the last nprobe against itself


def test_profile_fills_prints_the_open_and_the_fills_costliest_functions(built):
    out = run_module(
        "bench.profile_fills", "--index", str(built / "idx"), "--corpus", str(SAMPLE), "--fills", "2", "--warm"
    )
    assert re.search(r"open the index: \d+\.\d\d s", out) and "phrase_index.py" in out
    assert re.search(r"2 fills: \d+\.\d\d s", out) and float(out.rsplit("ms a fill (profiled)", 1)[1]) > 0
