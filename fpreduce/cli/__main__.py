"""``python -m fpreduce.cli``: the ``fpreduce`` command (the program ``mpirun`` launches)."""

import sys

from fpreduce.cli import main

sys.exit(main())
