"""Run ``python ARGS...`` with torch/OpenMP limited to N threads (OMP_NUM_THREADS, MKL_NUM_THREADS).

    python scripts/with_threads.py 1 -m spacy train ...

On a small or shared CPU machine, OpenMP threads that spin against each other make torch's LSTM
and transformer steps many times slower; one thread per process is then much faster. The
variables must be set before torch is imported, hence a wrapper rather than a config setting.
"""
import os
import sys


def main() -> None:
    if len(sys.argv) < 3 or not sys.argv[1].isdigit():
        sys.exit("usage: python scripts/with_threads.py N PYTHON_ARGS...  (N = 0 leaves the "
                 "thread settings alone)")
    n = sys.argv[1]
    if n != "0":
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[name] = n
    os.execv(sys.executable, [sys.executable] + sys.argv[2:])


if __name__ == "__main__":
    main()
