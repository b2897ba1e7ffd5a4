"""`python -m llama_cpp.server` with ggml's extra buffer types off: the real-engine tier's engine.

Some hosts advertise AMX but fault on it: llama.cpp built with native CPU flags then loads the
weights into its AMX buffer type and dies with a general protection fault (`ldtilecfg` in
ggml_backend_amx_mul_mat) on the first completion. With the model parameter `use_extra_bufts`
off, no extra buffer type (AMX, CPU_REPACK) is used and the same build runs on every host.
llama_cpp.server has no flag for it, so this launcher sets it in the defaults the server's
Llama starts from, then runs the server with the same arguments.

Three flags of ours, removed before the server reads its arguments, make Gemma's behaviour
something a test can rely on (how long it talks depends on the host's CPU and its sampler):
- `--fault-on-first-completion` makes the engine die of SIGSEGV on its first decode, as the AMX
  fault does: a real engine that lists its model and then crashes, for doctor's test.
- `--max-tokens-cap N` generates at most N tokens per completion, whatever the request asks
  (finish_reason "length"), so that a whole episode takes seconds on any host.
- `--decode-delay SECONDS` sleeps that long before each llama_decode and logs
  `launcher: decode` for it, so that a test can cancel mid-generation and see it stop.
Run this file by path with `python -P` so that its folder does not shadow installed packages.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

FAULT_FLAG = "--fault-on-first-completion"
CAP_FLAG = "--max-tokens-cap"
DELAY_FLAG = "--decode-delay"
DECODE_LINE = "launcher: decode"


def take_option(argv: list[str], flag: str) -> str | None:
    """Remove `flag VALUE` from `argv` and return VALUE (None when absent)."""
    if flag not in argv:
        return None
    at = argv.index(flag)
    value = argv[at + 1]
    del argv[at : at + 2]
    return value


def main() -> None:
    """Patch llama.cpp's model defaults (and the test behaviours asked for), then run llama_cpp.server."""
    import llama_cpp
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
    cap = take_option(sys.argv, CAP_FLAG)
    if cap is not None:
        create_completion = llama_cpp.Llama.create_completion

        def capped(self: Any, *args: Any, **kwargs: Any) -> Any:
            asked = kwargs.get("max_tokens")
            kwargs["max_tokens"] = int(cap) if asked is None or asked <= 0 else min(asked, int(cap))
            return create_completion(self, *args, **kwargs)

        llama_cpp.Llama.create_completion = capped  # type: ignore[method-assign]
    delay = take_option(sys.argv, DELAY_FLAG)
    if delay is not None:
        decode = low_level.llama_decode

        def slow_decode(*args: Any) -> Any:
            print(DECODE_LINE, file=sys.stderr, flush=True)
            time.sleep(float(delay))
            return decode(*args)

        low_level.llama_decode = slow_decode
    serve()


if __name__ == "__main__":
    main()
