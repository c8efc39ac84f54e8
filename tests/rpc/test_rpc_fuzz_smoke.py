"""A short run of the RPC frame fuzz campaign (tests/fuzz/rpc_frames.py) in the suite:
mutated request streams end the session normally or with RPCError, never anything else."""

from __future__ import annotations

import importlib.util
from pathlib import Path

FUZZ = Path(__file__).resolve().parents[1] / "fuzz" / "rpc_frames.py"


def _campaign():
    spec = importlib.util.spec_from_file_location("rpc_frames", FUZZ)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rpc_frames_fuzz_smoke(tmp_path):
    counts = _campaign().run(inputs=4000, seed=3, out_dir=tmp_path, log=lambda _: None)
    assert counts["inputs"] == 4000
    # Both outcomes occur: mutations reach past the framing into calls, copies and syscalls.
    assert counts["ok"] > 40 and counts["rejected"] > 1000, counts
    assert not (tmp_path / "finding.bin").exists()


def test_rpc_frames_fuzz_smoke_through_the_c_serve_loop(tmp_path):
    counts = _campaign().run(inputs=800, seed=5, out_dir=tmp_path, log=lambda _: None,
                             transport="socket")
    assert counts["ok"] > 10 and counts["rejected"] > 200, counts
    assert not (tmp_path / "finding.bin").exists()


def test_unmutated_seeds_are_served_to_the_end(tmp_path):
    campaign = _campaign()
    for index, stream in enumerate(campaign.seed_streams()):
        for codec in ("v0.16", "ffi"):
            for transport in ("memory", "socket"):
                outcome = campaign.serve_one(stream, codec, tmp_path, transport)
                if (codec == "ffi") == (index >= len(campaign.seed_streams()) // 2):
                    assert outcome == "ok", (index, codec, transport)
