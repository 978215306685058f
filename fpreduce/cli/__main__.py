"""``python -m fpreduce.cli``: the ``fpreduce`` command (the program ``mpirun`` launches)."""

import sys

from fpreduce.cli import main

if __name__ == "__main__":  # not when mpi4py.futures' workers import the main module (as __mp_main__)
    sys.exit(main())
