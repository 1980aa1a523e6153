"""`python -m service --index DIR [--host H] [--port P] ...`: the server (service.server).

OpenMP's threads (torch's encoder, FAISS) are told to wait passively (`OMP_WAIT_POLICY=PASSIVE` unless
set; common.process.passive_openmp) before anything imports torch or FAISS, so the server is imported
only inside `main`."""

from __future__ import annotations

from common.process import passive_openmp


def main(argv: list[str] | None = None) -> None:
    passive_openmp()
    from service.server import app  # loads torch and FAISS

    app(args=argv, prog_name="python -m service")


if __name__ == "__main__":
    main()
