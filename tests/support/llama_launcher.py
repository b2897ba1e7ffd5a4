"""`python -m llama_cpp.server` with ggml's extra buffer types off: the real-engine tier's engine.

Some hosts advertise AMX but fault on it: llama.cpp built with native CPU flags then loads the
weights into its AMX buffer type and dies with a general protection fault (`ldtilecfg` in
ggml_backend_amx_mul_mat) on the first completion. With the model parameter `use_extra_bufts`
off, no extra buffer type (AMX, CPU_REPACK) is used and the same build runs on every host.
llama_cpp.server has no flag for it, so this launcher sets it in the defaults the server's
Llama starts from, then runs the server with the same arguments.

`--fault-on-first-completion` (ours, removed before the server reads its arguments) makes the
engine die of SIGSEGV on its first decode, as the AMX fault does: a real engine that lists its
model and then crashes, for doctor's test. Run this file by path with `python -P` so that its
folder does not shadow installed packages.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

FAULT_FLAG = "--fault-on-first-completion"


def main() -> None:
    """Patch llama.cpp's model defaults (and the fault, if asked), then run llama_cpp.server."""
    import llama_cpp.llama_cpp as low_level
    from llama_cpp.server.__main__ import main as serve

    default_params = low_level.llama_model_default_params

    def params_without_extra_buffers() -> Any:
        params = default_params()
        params.use_extra_bufts = False
        return params

    low_level.llama_model_default_params = params_without_extra_buffers
    if FAULT_FLAG in sys.argv:
        sys.argv.remove(FAULT_FLAG)

        def fault(*args: Any) -> Any:
            os.kill(os.getpid(), signal.SIGSEGV)

        low_level.llama_decode = fault
    serve()


if __name__ == "__main__":
    main()
