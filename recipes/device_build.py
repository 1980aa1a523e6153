"""Pack an encoder and a corpus small enough to travel to a lent GPU machine, and unpack them there.

    python -m recipes.device_build pack --model encoder/default_model --corpus data-local/debian/corpus_3m.jsonl \\
        --probes data-local/bench/cloze_3m.jsonl --out data-local/gpu_build
    python3 -m recipes.device_build unpack --packed data-local/gpu_build --out /tmp/model      # on the device

The device's working tree is limited to 64 MiB: the bundled encoder (45 MB in fp16) plus the faiss-cpu wheel
(19 MB) do not fit beside the code. `pack` writes the model directory with its word-embedding matrix (half its
bytes) as int8 rows with one scale each (`words.safetensors`) and the corpus gzipped; `unpack` restores the matrix
(fp16, each value within half a step of its row's scale of the original). Both paths of recipes/device_build.sh use
the same unpacked model, so their fills must agree; the build's throughput does not depend on the values.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from recipes.blend_models import WEIGHTS, write_model

WORDS = "embeddings.word_embeddings.weight"
PACKED = "words.safetensors"


def cmd_pack(args: argparse.Namespace) -> int:
    tensors = load_file(str(args.model / WEIGHTS))
    key = next((k for k in tensors if k.endswith(WORDS)), None)
    if key is None:
        raise SystemExit(f"error: {args.model / WEIGHTS} has no {WORDS}; pack a BERT-style encoder")
    words = tensors.pop(key).float()
    scale = words.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127.0
    write_model(args.model, tensors, args.out / "model")
    save_file(
        {"codes": torch.round(words / scale).to(torch.int8), "scale": scale},
        str(args.out / PACKED),
        metadata={"key": key},
    )
    with open(args.corpus, "rb") as src, gzip.open(args.out / "corpus.jsonl.gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    if args.probes:
        shutil.copyfile(args.probes, args.out / "probes.jsonl")
    size = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    print(f"packed {args.out}: {size / 2**20:.1f} MiB")
    return 0


def cmd_unpack(args: argparse.Namespace) -> int:
    model = args.packed / "model"
    tensors = load_file(str(model / WEIGHTS))
    with safe_open(str(args.packed / PACKED), "pt") as f:
        key = f.metadata()["key"]
        tensors[key] = f.get_tensor("codes").float() * f.get_tensor("scale")
    write_model(model, tensors, args.out)
    print(f"{len(tensors)} tensors -> {args.out} ({key} from int8 rows)")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    pack = sub.add_parser("pack")
    pack.add_argument("--model", type=Path, required=True)
    pack.add_argument("--corpus", type=Path, required=True)
    pack.add_argument("--probes", type=Path, default=None)
    pack.add_argument("--out", type=Path, required=True)
    unpack = sub.add_parser("unpack")
    unpack.add_argument("--packed", type=Path, required=True)
    unpack.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    return cmd_pack(args) if args.cmd == "pack" else cmd_unpack(args)


if __name__ == "__main__":
    raise SystemExit(main())
