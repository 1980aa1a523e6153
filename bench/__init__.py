"""The measurements: benchmarks, comparisons and checks of the engine, the index and the server, each a module run
from the repository root with `python -m bench.NAME --help`, and their shell drivers (`bash bench/NAME.sh`).
bench.shared holds what they share (probes, the server process, the load generator, prediction files). Training
and data preparation are recipes/; the docs generator is tools/."""
