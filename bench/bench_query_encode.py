"""The query encoder for one short query at a time, as /fill runs it, in several runtimes on this CPU:

    python -m bench.bench_query_encode [--model DIR] [--corpus data/sample/encyclopedia.jsonl] [--queries 200]

Per runtime: ms per query (p50 / mean) of the bare forward pass over the queries' token ids, and how
far its mask vectors are from the served path's (`Encoder` with its run-time dtype choice): the
largest absolute difference and the smallest cosine. Tokenization (`Encoder.query_layout`) and the
whole `encode_queries` are timed too, so the share of each part is visible. Runtimes: fp32, bf16
autocast, torch.compile of each, torch.jit.trace (fp32), ONNX Runtime (fp32; when onnxruntime is installed:
`.venv/bin/pip install onnxruntime==1.32.0 onnx==1.23.2`, not dependencies of the project). All in one run: compare
ratios, not
absolute figures (the machines are shared).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bench.shared import make_probes

ROOT = Path(__file__).resolve().parents[1]


def _timed(fn, items, warmup: int = 5) -> tuple[list[float], list]:
    for item in items[:warmup]:
        fn(item)
    times, outs = [], []
    for item in items:
        t = time.perf_counter()
        outs.append(fn(item))
        times.append((time.perf_counter() - t) * 1000)
    return times, outs


def _onnx_runtime(model, example_ids: list[int], threads: int):
    """The model exported to ONNX (fp32) and run by ONNX Runtime on `threads` threads, as a forward function,
    or None (with the reason printed) when onnxruntime is missing or the export fails."""
    try:
        import onnxruntime as ort
    except ImportError:
        print("ONNX Runtime not measured: .venv/bin/pip install onnxruntime==1.32.0 onnx==1.23.2")
        return None

    class Hidden(torch.nn.Module):
        def __init__(self, inner) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, ids, att, types):
            return self.inner(input_ids=ids, attention_mask=att, token_type_ids=types, return_dict=False)[0]

    path = Path(tempfile.mkdtemp()) / "encoder.onnx"
    x = torch.tensor([example_ids])
    names = ["input_ids", "attention_mask", "token_type_ids"]
    try:
        torch.onnx.export(
            Hidden(model).eval(),
            (x, torch.ones_like(x), torch.zeros_like(x)),
            str(path),
            input_names=names,
            output_names=["hidden"],
            opset_version=17,
            dynamo=False,
            dynamic_axes={n: {0: "batch", 1: "tokens"} for n in names + ["hidden"]},
        )
    except Exception as exc:  # exporter support varies by model class and torch version
        print(f"ONNX export failed: {type(exc).__name__}: {str(exc)[:200]}")
        return None
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def forward(ids, att, types):
        feed = dict(zip(names, (ids.numpy(), att.numpy(), types.numpy())))
        return torch.from_numpy(session.run(None, feed)[0])

    return forward


def _with_onnx(variants: list, model, example_ids: list[int]):
    """The variants, then ONNX Runtime's (exported only after the torch variants ran)."""
    yield from variants
    onnx = _onnx_runtime(model, example_ids, torch.get_num_threads())
    if onnx is not None:
        yield ("fp32 ONNX Runtime", onnx, False)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, default=None)
    p.add_argument("--corpus", type=Path, default=ROOT / "data" / "sample" / "encyclopedia.jsonl")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    return p.parse_args()


def _runner(forward, autocast_bf16: bool):
    """run(layout): the mask vectors (start, end) of one query's forward pass through `forward`."""

    def run(layout):
        ids, pos = layout
        x = torch.tensor([ids])
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast_bf16):
            h = forward(x, torch.ones_like(x), torch.zeros_like(x))
        h = h[0].float().numpy()
        pos = np.asarray(pos)
        return np.concatenate([h[pos], h[pos + 1]])

    return run


def _torch_variants(model, example_ids: list[int]) -> list:
    """(name, forward, bf16 autocast) of the torch runtimes: eager, torch.compile, torch.jit.trace (when it traces)."""
    eager = lambda ids, att, types: model(input_ids=ids, attention_mask=att, token_type_ids=types).last_hidden_state  # noqa: E731
    variants = [("fp32 eager", eager, False), ("bf16 autocast eager", eager, True)]
    compiled = torch.compile(eager, dynamic=True)
    variants += [("fp32 torch.compile", compiled, False), ("bf16 torch.compile", compiled, True)]
    try:
        example = torch.tensor([example_ids])
        with torch.inference_mode():
            traced = torch.jit.trace(
                lambda ids, att, types: model(
                    input_ids=ids, attention_mask=att, token_type_ids=types, return_dict=False
                )[0],
                (example, torch.ones_like(example), torch.zeros_like(example)),
                check_trace=False,
                strict=False,
            )
        variants.append(("fp32 torch.jit.trace", traced, False))
    except Exception as exc:  # tracing support varies by model class; report and go on
        print(f"torch.jit.trace failed: {str(exc)[:200]}")
    return variants


def _print_rows(rows: list) -> None:
    base = statistics.median(rows[2][1]) if len(rows) > 2 else 1.0
    print(f"{'runtime':<28} {'p50 ms':>8} {'mean ms':>8} {'vs fp32':>8} {'max |diff|':>11} {'min cos':>9}")
    for name, times, diff in rows:
        extra = f"{diff[0]:>11.4f} {diff[1]:>9.5f}" if diff else ""
        print(
            f"{name:<28} {statistics.median(times):>8.2f} {statistics.mean(times):>8.2f} "
            f"{statistics.median(times) / base:>8.2f} {extra}"
        )


def main() -> None:
    args = parse_args()
    from encoder.model import Encoder

    if args.threads:
        torch.set_num_threads(args.threads)
    texts = make_probes(args.corpus, args.queries)
    served = Encoder(args.model)
    layouts = [served.query_layout(t) for t in texts]
    reference = [served.encode_queries([t])[0] for t in texts]
    ref = np.concatenate([np.concatenate([q.q_start, q.q_end]) for q in reference])
    print(
        f"{len(texts)} queries, {statistics.mean(len(ids) for ids, _ in layouts):.1f} tokens on average; "
        f"served dtype {str(served.dtype).replace('torch.', '')}, {torch.get_num_threads()} threads"
    )
    t_tok, _ = _timed(served.query_layout, texts)
    t_all, _ = _timed(lambda t: served.encode_queries([t]), texts)
    rows = [("tokenize (query_layout)", t_tok, None), ("encode_queries (served)", t_all, None)]
    model = served.model
    model.requires_grad_(False)  # inference only (torch.jit.trace refuses parameters that require grad)
    for name, forward, bf16 in _with_onnx(_torch_variants(model, layouts[0][0]), model, layouts[0][0]):
        try:  # on the served encoder's thread, as the served path runs (one OpenMP team)
            times, outs = served.on_thread(_timed, _runner(forward, bf16), layouts)
        except Exception as exc:
            print(f"{name}: failed ({type(exc).__name__}: {str(exc)[:200]})")
            continue
        got = np.concatenate(outs)
        cos = (got * ref).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1))
        rows.append((name, times, (float(np.abs(got - ref).max()), float(cos.min()))))
    _print_rows(rows)


if __name__ == "__main__":
    main()
