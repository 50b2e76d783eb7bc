"""Run a run script under DeepSpeed on CPU processes (``torchrun ... tests/deepspeed_cpu_launch.py <script> ...``),
for the DeepSpeed tests: accelerate sets DeepSpeed up only for accelerators, so here its state takes the CPU processes
for accelerators over gloo, and keplm's refusal of a CPU DeepSpeed launch is told there is one. Everything else (the
Trainer's DeepSpeed engine, its checkpoints, keplm's saving) runs as on GPUs."""

import logging
import os
import runpy
import sys

from accelerate.state import PartialState
from accelerate.utils import DistributedType

import keplm.training.arguments as arguments

_prepare_backend = PartialState._prepare_backend


def _cpu_as_accelerator(self, cpu=False, sagemaker_dp=False, backend=None):
    chosen, distributed_type = _prepare_backend(self, cpu, sagemaker_dp, backend)
    if chosen is None and not cpu:
        return "gloo", DistributedType.MULTI_CPU
    return chosen, distributed_type


PartialState._prepare_backend = _cpu_as_accelerator
arguments._has_accelerator = lambda: True

if __name__ == "__main__":
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
    # The run is over (an error or a non-zero exit raised above): leave without interpreter finalization, during which
    # gloo's worker threads, alive under DeepSpeed over gloo (this CPU emulation only), abort the process now and then
    # ("terminate called without an active exception"; docs/reliability.md, R54).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
