"""A small stdlib client for the demo: POST /fill and print the answer readably.

    python deploy/fill_client.py URL '{"text": "Paris is the capital of <mask> ."}'
"""

import json
import sys
import urllib.request


def main() -> None:
    url, body = sys.argv[1], sys.argv[2]
    req = urllib.request.Request(url, data=body.encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        r = json.load(resp)
    print(f"POST /fill {body}")
    print(f"  filled: {r['filled']}")
    for m in r["masks"]:
        cands = ", ".join(f"{c['phrase']!r} (score {c['score']:.3f}, confidence {c['confidence']:.2f})"
                          for c in m["candidates"])
        print(f"  mask {m['index']}: {'abstained: no fill is confident enough' if m['abstained'] else cands}")
        if m["candidates"] and m["candidates"][0]["evidence"]:
            e = m["candidates"][0]["evidence"][0]
            print(f"    evidence: doc {e['doc_id']} chars {e['start']}-{e['end']}: {e['context']}")
    print(f"  took {r['took_ms']:.1f} ms")


if __name__ == "__main__":
    main()
