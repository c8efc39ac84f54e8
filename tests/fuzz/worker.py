"""A fuzz worker process: ``python -m tests.fuzz.worker TARGET`` loads inputs it is sent.

Protocol on its stdin/stdout (binary): the campaign sends ``u32 length`` + input bytes; the
worker answers one JSON line ``{"status": "ok"|"tvm"|"bare", "type": ..., "message": ...}``.
Before the first input it sends ``{"status": "ready"}``. A crash ends the process (the
campaign sees EOF) and a hang never answers; the campaign restarts the worker either way.
Anything the loader prints goes to stderr, so it cannot corrupt the answers.
"""

from __future__ import annotations

import json
import os
import resource
import struct
import sys

# Big enough for the loaders' honest work, small enough that a size check kiln forgot shows up
# as a MemoryError finding instead of swapping the shared machine.
MEMORY_LIMIT = 4 << 30


def main(name: str) -> None:
    answers = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # loader output (Python or C) goes to stderr
    sys.stdout = sys.stderr
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    from kiln.runtime.error import TVMError
    from tests.fuzz.targets import get_target

    run = get_target(name).setup()
    requests = sys.stdin.buffer

    def answer(status: str, error: BaseException | None = None) -> None:
        reply = {"status": status}
        if error is not None:
            reply["type"] = type(error).__name__
            reply["message"] = str(error)[:2000]
        answers.write(json.dumps(reply).encode() + b"\n")

    answer("ready")
    while True:
        header = requests.read(4)
        if len(header) < 4:
            return
        (length,) = struct.unpack("<I", header)
        data = requests.read(length)
        try:
            run(data)
        except TVMError as err:
            answer("tvm", err)
        except BaseException as err:  # noqa: B036 - the finding (SystemExit included)
            answer("bare", err)
        else:
            answer("ok")


if __name__ == "__main__":
    main(sys.argv[1])
