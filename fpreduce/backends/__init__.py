"""Real collective libraries, to prove the emulation bit for bit (optional extras).

``mpi``: Open MPI through mpi4py; ``gloo``: torch.distributed's gloo backend on
the CPU. Neither is imported by the core; a missing library raises
InvalidArgument with the install command.
"""

from fpreduce.backends._common import BackendError, CaseResult, VerifyResult
from fpreduce.backends._verify import BACKENDS, algorithms, dtypes, verify

__all__ = ["BACKENDS", "BackendError", "CaseResult", "VerifyResult", "algorithms", "dtypes", "verify"]
