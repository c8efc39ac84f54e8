"""Tuning records: TVM's JSON-lines log format (``AUTOTVM_LOG_VERSION`` 0.2).

Entry points: :func:`encode` / :func:`decode` (one line <-> ``(MeasureInput,
MeasureResult)``), :func:`load_from_file`, :func:`pick_best`, :func:`measure_str_key`.

A line is ``{"input": [target, task_name, args, kwargs], "config": {"index", "code_hash",
"entity"}, "result": [costs, error_no, all_cost, timestamp], "version": 0.2,
"tvm_version": ...}``; ``costs`` is ``[1e9]`` for a failed measurement. ``#`` lines and
blank lines are skipped; ``"v": 0.1`` lines (an older format) are skipped as TVM does.
``tvm_version`` holds kiln's version: TVM never reads it back.

Example
-------
>>> from kiln.autotvm.record import decode, encode
>>> line = ('{"input": ["llvm -keys=cpu", "dense_pack.x86", [["TENSOR", [1, 64], "float32"], '
...         '["TENSOR", [32, 64], "float32"], null, "float32"], {}], "config": {"index": 3, '
...         '"code_hash": null, "entity": [["tile_k", "sp", [-1, 4]]]}, "result": [[1e-05], 0, '
...         '0.5, 1700000000.0], "version": 0.2, "tvm_version": "0.16.0"}')
>>> inp, res = decode(line)
>>> inp.task.workload[0], inp.config["tile_k"].size, res.costs
('dense_pack.x86', [-1, 4], (1e-05,))
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kiln
from kiln.autotvm.measure.measure import MeasureInput, MeasureResult
from kiln.autotvm.task.space import ConfigEntity
from kiln.autotvm.task.task import Task
from kiln.runtime.error import TVMError

__all__ = ["AUTOTVM_LOG_VERSION", "encode", "decode", "load_from_file", "load_from_buffer",
           "pick_best", "measure_str_key"]

AUTOTVM_LOG_VERSION = 0.2
logger = logging.getLogger("autotvm")


def measure_str_key(inp: MeasureInput, include_config: bool = True) -> str:
    """A string key of a measure input (target, task, args, and the config if asked)."""
    config = str(inp.config) if include_config else ""
    return f"{inp.target}{inp.task.name}{inp.task.args}{{}}{config}"


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    return value


def _tupled(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_tupled(v) for v in value)
    return value


def encode(inp: MeasureInput, result: MeasureResult, protocol: str = "json") -> str:
    """One log line for a measured config."""
    if protocol != "json":
        raise TVMError(f"log protocol {protocol!r} is not supported; kiln reads and writes "
                       "'json'")
    row = {
        "input": [str(inp.target), inp.task.name, _jsonable(inp.task.args), {}],
        "config": inp.config.to_json_dict(),
        "result": [list(result.costs) if result.error_no == 0 else [1e9], int(result.error_no),
                   result.all_cost, result.timestamp],
        "version": AUTOTVM_LOG_VERSION,
        "tvm_version": kiln.__version__,
    }
    return json.dumps(row)


def decode(row: str, protocol: str = "json") -> tuple[MeasureInput, MeasureResult] | None:
    """The ``(MeasureInput, MeasureResult)`` of a log line; None for an old-format row."""
    from kiln.target import Target

    if protocol != "json":
        raise TVMError(f"log protocol {protocol!r} is not supported; kiln reads 'json'")
    try:
        data = json.loads(row)
    except json.JSONDecodeError as err:
        raise TVMError(f"AutoTVM record is not JSON ({err.msg} at column {err.colno}): "
                       f"{row[:120]!r}") from None
    if not isinstance(data, dict):
        raise TVMError(f"AutoTVM record must be a JSON object, got {type(data).__name__}")
    if "v" in data and data["v"] == 0.1:
        return None
    for field in ("input", "config", "result"):
        if field not in data:
            raise TVMError(f"AutoTVM record has no {field!r} field: {row[:120]!r}")
    try:
        target_str, task_name, args, _kwargs = data["input"]
        costs, error_no, all_cost, timestamp = data["result"]
    except (TypeError, ValueError):
        raise TVMError("AutoTVM record: 'input' must be [target, task, args, kwargs] and "
                       "'result' [costs, error_no, all_cost, timestamp]") from None
    target_str = str(target_str)
    if "-target" in target_str:  # TVM's old spelling of the triple
        target_str = target_str.replace("-target", "-mtriple")
    task = Task(str(task_name), _tupled(args))
    task.target = Target(target_str)
    config = ConfigEntity.from_json_dict(data["config"])
    result = MeasureResult(tuple(costs), int(error_no), float(all_cost), float(timestamp))
    config.cost = sum(result.costs) / len(result.costs) if result.costs else None
    return MeasureInput(task.target, task, config), result


def load_from_buffer(lines: Any) -> Iterator[tuple[MeasureInput, MeasureResult]]:
    """Records of an iterable of lines (``#`` and blank lines skipped)."""
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            record = decode(line)
        except TVMError as err:
            raise TVMError(f"line {number}: {err}") from None
        if record is not None:
            yield record


def load_from_file(filename: str | Path) -> Iterator[tuple[MeasureInput, MeasureResult]]:
    """The records of a log file, in order."""
    path = Path(filename)
    if not path.is_file():
        raise TVMError(f"tuning log {str(path)!r} does not exist")
    with path.open() as f:
        yield from (r for r in _named(load_from_buffer(f), path))


def _named(records: Iterator, path: Path) -> Iterator:
    try:
        yield from records
    except TVMError as err:
        raise TVMError(f"{path}: {err}") from None


def pick_best(in_file: str | Path, out_file: str | Path) -> None:
    """Write to ``out_file`` the best (lowest mean cost) record per target and workload."""
    best: dict[tuple, tuple] = {}
    for inp, res in load_from_file(in_file):
        if res.error_no != 0:
            continue
        key = (str(inp.target), inp.task.workload)
        cost = sum(res.costs) / len(res.costs)
        if key not in best or cost < best[key][0]:
            best[key] = (cost, inp, res)
    with Path(out_file).open("w") as f:
        for _, inp, res in best.values():
            f.write(encode(inp, res) + "\n")
    logger.info("pick_best: %d records written to %s", len(best), out_file)
