"""A small stdlib client for the demo: POST /fill or /score and print the answer readably.

python deploy/fill_client.py URL/fill '{"text": "Paris is the capital of <mask> ."}'
python deploy/fill_client.py URL/score '{"text": "It was <mask> .", "choices": ["great", "terrible"]}'
"""

import json
import sys
import urllib.request


def show_fill(r: dict) -> None:
    print(f"  filled: {r['filled']}")
    for m in r["masks"]:
        cands = ", ".join(
            f"{c['phrase']!r} (score {c['score']:.3f}, confidence {c['confidence']:.2f})" for c in m["candidates"]
        )
        print(f"  mask {m['index']}: {'abstained: no fill is confident enough' if m['abstained'] else cands}")
        if m["candidates"] and m["candidates"][0]["evidence"]:
            e = m["candidates"][0]["evidence"][0]
            print(f"    evidence: doc {e['doc_id']} chars {e['start']}-{e['end']}: {e['context']}")


def show_score(r: dict) -> None:
    for m in r["masks"]:
        probs = ", ".join(f"{c['label']} {c['probability']:.2f}" for c in m["choices"])
        print(
            f"  mask {m['index']}: {'abstained: no retrieved token voted' if m['abstained'] else m['predicted']}"
            f" ({probs})"
        )
        best = next((c for c in m["choices"] if c["label"] == m["predicted"]), None)
        if best and best["evidence"]:
            e = best["evidence"][0]
            print(f"    evidence: doc {e['doc_id']} chars {e['start']}-{e['end']}: {e['context']}")


def main() -> None:
    url, body = sys.argv[1], sys.argv[2]
    req = urllib.request.Request(url, data=body.encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        r = json.load(resp)
    route = url.rstrip("/").rsplit("/", 1)[-1]
    print(f"POST /{route} {body if route == 'fill' else json.loads(body)['text']}")
    show_score(r) if route == "score" else show_fill(r)
    print(f"  took {r['took_ms']:.1f} ms")


if __name__ == "__main__":
    main()
