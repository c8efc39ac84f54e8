"""Utilities of ``tvm.micro.testing`` (TVM's ``python/tvm/micro/testing/utils.py``).

Entry points: :func:`get_target`, :func:`get_supported_platforms`,
:func:`get_supported_boards`, :func:`mlf_extract_workspace_size_bytes`,
:func:`get_conv2d_relay_module`, :func:`create_header_file`, :func:`check_tune_log`.

kiln's platforms are ``crt`` (the host) and ``qemu-cortex-m`` (an emulated Cortex-M; its
boards are the MPS2 images QEMU models, see ``reference/qemu-cortex-m.md``).
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from typing import Any

import numpy as np

from kiln.runtime.error import TVMError

__all__ = ["get_target", "get_supported_platforms", "get_supported_boards",
           "mlf_extract_workspace_size_bytes", "get_conv2d_relay_module",
           "create_header_file", "check_tune_log"]

# board -> its description (model, CPU); what get_target needs of a board
_BOARDS = {
    "qemu-cortex-m": {
        "mps2_an386": {"model": "mps2_an386", "mcpu": "cortex-m4", "qemu_machine": "mps2-an386"},
        "mps2_an500": {"model": "mps2_an500", "mcpu": "cortex-m7", "qemu_machine": "mps2-an500"},
    },
}


def get_supported_platforms() -> list[str]:
    """Platforms that have boards (``crt``, the host, needs none)."""
    return sorted(_BOARDS)


def get_supported_boards(platform: str) -> dict[str, dict[str, Any]]:
    """``{board: {"model", "mcpu", ...}}`` of a platform."""
    if platform not in _BOARDS:
        raise TVMError(f"unknown micro platform {platform!r}; platforms with boards are "
                       f"{get_supported_platforms()} (and 'crt', the host)")
    return {name: dict(info) for name, info in _BOARDS[platform].items()}


def get_target(platform: str, board: str | None = None) -> Any:
    """A Target for a platform's board: ``get_target("crt")`` is ``micro("host")``.

    Example
    -------
    >>> str(get_target("qemu-cortex-m", "mps2_an386"))
    'c -keys=arm_cpu,cpu -mcpu=cortex-m4 -model=mps2_an386'
    """
    from kiln.target import Target
    from kiln.target.target import micro

    if platform == "crt":
        return micro("host")
    if not board:
        raise ValueError(f"`board` type is required for {platform} platform.")
    boards = get_supported_boards(platform)
    if board not in boards:
        raise TVMError(f"unknown board {board!r} for platform {platform!r}; boards are "
                       f"{sorted(boards)}")
    info = boards[board]
    return Target(f"c -keys=arm_cpu -mcpu={info['mcpu']} -model={info['model']}")


def check_tune_log(log_path: str | os.PathLike) -> None:
    """Every record of a tuning log measured under 1e9 seconds."""
    with open(log_path) as f:
        for line in f:
            if line.strip():
                assert json.loads(line)["result"][0][0] < 1000000000.0


def mlf_extract_workspace_size_bytes(mlf_tar_path: str | os.PathLike) -> int:
    """Sum of the main functions' ``workspace_size_bytes`` in an MLF's metadata.json."""
    from kiln.micro.model_library_format import read_metadata

    metadata = read_metadata(mlf_tar_path)
    return sum(module["memory"]["functions"]["main"][0]["workspace_size_bytes"]
               for module in metadata["modules"].values())


def get_conv2d_relay_module() -> Any:
    """The int8 conv2d (1x3x64x64 data, 8x3x5x5 weight, int32 out) of TVM's micro tests."""
    import kiln as tvm
    from kiln import relay

    data = relay.var("data", relay.TensorType((1, 3, 64, 64), "int8"))
    weight = relay.var("weight", relay.TensorType((8, 3, 5, 5), "int8"))
    y = relay.nn.conv2d(data, weight, padding=(2, 2), channels=8, kernel_size=(5, 5),
                        data_layout="NCHW", kernel_layout="OIHW", out_dtype="int32")
    mod = tvm.IRModule.from_expr(relay.Function([data, weight], y))
    return relay.transform.InferType()(mod)


_C_TYPES = {"int8": "int8_t", "int32": "int32_t", "uint8": "uint8_t", "float32": "float"}


def create_header_file(tensor_name: str, npy_data: np.ndarray, output_path: str,
                       tar_file: tarfile.TarFile) -> None:
    """Add ``<output_path>/<tensor_name>.h`` holding ``npy_data`` as a C array to a tar."""
    ctype = _C_TYPES.get(str(npy_data.dtype))
    if ctype is None:
        raise ValueError(f"Data type {npy_data.dtype} not expected.")
    text = io.StringIO()
    text.write("#include <stddef.h>\n#include <stdint.h>\n#include <dlpack/dlpack.h>\n")
    text.write(f"const size_t {tensor_name}_len = {npy_data.size};\n")
    text.write(f"{ctype} {tensor_name}[] =")
    text.write("{" + "".join(f"{v}, " for v in npy_data.reshape(-1)) + "};\n\n")
    data = text.getvalue().encode()
    info = tarfile.TarInfo(name=os.path.join(output_path, f"{tensor_name}.h"))
    info.size, info.mode, info.type = len(data), 0o644, tarfile.REGTYPE
    tar_file.addfile(info, io.BytesIO(data))
