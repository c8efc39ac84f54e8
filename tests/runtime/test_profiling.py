"""BenchmarkResult statistics, the timing loop and the per-op Report table."""

from __future__ import annotations

import json
import statistics

import numpy as np
import pytest

from kiln.runtime.error import TVMError
from kiln.runtime.profiling import BenchmarkResult, Report, time_repeats


def test_benchmark_result_statistics_match_python_statistics():
    samples = [0.004, 0.001, 0.003, 0.010, 0.002]
    result = BenchmarkResult(samples)
    assert result.results == samples
    assert result.mean == pytest.approx(statistics.fmean(samples))
    assert result.median == pytest.approx(statistics.median(samples))
    assert result.min == 0.001 and result.max == 0.010
    assert result.std == pytest.approx(statistics.pstdev(samples))


def test_benchmark_result_str_is_a_millisecond_table():
    text = str(BenchmarkResult([0.001, 0.003]))
    lines = text.splitlines()
    assert lines[0] == "Execution time summary:"
    assert lines[1].split() == ["mean", "(ms)", "median", "(ms)", "max", "(ms)", "min", "(ms)",
                                "std", "(ms)"]
    assert [float(v) for v in lines[2].split()] == [2.0, 2.0, 3.0, 1.0, 1.0]
    assert "mean=0.002" in repr(BenchmarkResult([0.001, 0.003]))


def test_benchmark_result_needs_a_measurement():
    with pytest.raises(TVMError, match="at least one"):
        BenchmarkResult([])


def test_time_repeats_calls_run_with_number_after_one_warmup():
    calls = []
    result = time_repeats(calls.append, repeat=3, number=4)
    assert calls == [1, 4, 4, 4]
    assert len(result.results) == 3


def test_time_repeats_grows_number_to_reach_min_repeat_ms():
    calls = []

    def run(n):
        calls.append(n)
        total = 0
        for i in range(2000 * n):
            total += i

    result = time_repeats(run, repeat=1, number=1, min_repeat_ms=20)
    assert calls[-1] > 1, "number must grow until one repeat lasts 20 ms"
    assert result.results[0] * calls[-1] >= 0.020


@pytest.mark.parametrize("repeat,number", [(0, 1), (1, 0)])
def test_time_repeats_rejects_nonpositive_counts(repeat, number):
    with pytest.raises(TVMError, match=r"must be an integer in \[1, "):
        time_repeats(lambda n: None, repeat=repeat, number=number)


def _report():
    calls = [
        {"Name": "add0", "Op": "fused_add", "Duration (us)": 10.0, "Percent": 25.0, "Count": 1,
         "Device": "cpu0", "Output Shapes": "[(1, 4)]"},
        {"Name": "relu0", "Op": "fused_relu", "Duration (us)": 20.0, "Percent": 50.0,
         "Count": 1, "Device": "cpu0", "Output Shapes": "[(1, 4)]"},
        {"Name": "add1", "Op": "fused_add", "Duration (us)": 10.0, "Percent": 25.0, "Count": 1,
         "Device": "cpu0", "Output Shapes": "[(1, 4)]"},
    ]
    return Report(calls, {"cpu0": {"Duration (us)": 40.0}}, {"Executor": "Graph"})


def test_report_table_sorts_longest_first_and_sums():
    lines = _report().table().splitlines()
    assert lines[0].split()[:2] == ["Name", "Op"]
    assert lines[2].startswith("relu0")
    sum_line = next(line for line in lines if line.startswith("Sum"))
    assert sum_line.split()[1:3] == ["40.00", "100.00"]
    assert "Total on cpu0: Duration (us): 40.00" in lines
    assert "Executor: Graph" in lines


def test_report_aggregate_merges_rows_of_one_op():
    rows = {r["Name"]: r for r in _report().aggregated()}
    assert rows["fused_add"]["Duration (us)"] == 20.0
    assert rows["fused_add"]["Count"] == 2
    assert rows["fused_relu"]["Count"] == 1
    assert "fused_add" in _report().table(aggregate=True)


def test_report_csv_and_json_round_trip():
    report = _report()
    csv_lines = report.csv().splitlines()
    assert csv_lines[0] == "Name,Op,Duration (us),Percent,Count,Device,Output Shapes"
    assert csv_lines[1].startswith("add0,fused_add,10.0,25.0,1,cpu0")
    again = Report.from_json(report.json())
    assert again.calls == report.calls
    assert again.device_metrics == report.device_metrics
    assert json.loads(report.json())["configuration"] == {"Executor": "Graph"}


@pytest.mark.parametrize("text", ["not json", "{}", "[1, 2]"])
def test_report_from_json_rejects_garbage(text):
    with pytest.raises(TVMError, match="not a profiling report"):
        Report.from_json(text)


def test_time_repeats_retries_zero_time_measurements(monkeypatch):
    import kiln.runtime.profiling as profiling

    def fake_clock(readings):
        readings = iter(readings)
        monkeypatch.setattr(profiling.time, "perf_counter", lambda: next(readings))

    fake_clock([0.0, 0.0, 1.0, 2.0, 2.0, 5.0])  # the first measurement reads zero seconds
    assert time_repeats(lambda n: None, repeat=2, number=1).results == [1.0, 3.0]
    fake_clock([0.0, 0.0, 1.0, 2.0])
    result = time_repeats(lambda n: None, repeat=2, number=1, limit_zero_time_iterations=0)
    assert result.results == [0.0, 1.0]


def test_time_repeats_cools_down_between_repeats(monkeypatch):
    import kiln.runtime.profiling as profiling

    sleeps = []
    monkeypatch.setattr(profiling.time, "sleep", sleeps.append)
    time_repeats(lambda n: None, repeat=4, number=1, cooldown_interval_ms=5,
                 repeats_to_cooldown=2)
    assert sleeps == [0.005, 0.005]


def _add_one_module():
    import kiln
    from kiln import te

    a = te.placeholder((8,), name="A")
    b = te.compute((8,), lambda i: a[i] + 1.0, name="B")
    return kiln.build(te.create_schedule(b.op), [a, b], "c", name="add_one")


def test_profile_function_runs_warmups_then_each_collector_once():
    import kiln
    from kiln.runtime import profiling

    calls = []

    class Counting(profiling.MetricCollector):
        def init(self, devices):
            calls.append(("init", devices))

        def start(self, device):
            calls.append(("start", device))
            return len(calls)

        def stop(self, token):
            return {"Calls before stop": profiling.Count(len(calls) - token),
                    "Share": profiling.Percent(50)}

    mod = _add_one_module()
    prof = profiling.profile_function(mod, kiln.cpu(0), [Counting(), profiling.TimeCollector()],
                                      func_name="add_one", warmup_iters=3)
    x = kiln.nd.array(np.arange(8, dtype="float32"))
    y = kiln.nd.empty((8,))
    metrics = prof(x, y)
    np.testing.assert_array_equal(y.numpy(), np.arange(8) + 1.0)
    assert calls[0] == ("init", [profiling.DeviceWrapper(kiln.cpu(0))])
    assert [c[0] for c in calls] == ["init", "start"]
    assert metrics["Calls before stop"] == profiling.Count(0)
    assert metrics["Share"].value == 50.0
    assert isinstance(metrics["Duration (us)"], profiling.Duration)
    assert metrics["Duration (us)"].value > 0


def test_profile_function_rejects_bad_arguments():
    import kiln
    from kiln.runtime import profiling

    mod = _add_one_module()
    with pytest.raises(kiln.TVMError, match="no function 'missing'"):
        profiling.profile_function(mod, kiln.cpu(0), [], func_name="missing")
    with pytest.raises(kiln.TVMError, match="MetricCollector"):
        profiling.profile_function(mod, kiln.cpu(0), [object()], func_name="add_one")
    with pytest.raises(kiln.TVMError, match="warmup_iters"):
        profiling.profile_function(mod, kiln.cpu(0), [], func_name="add_one", warmup_iters=-1)
    with pytest.raises(kiln.TVMError, match="device"):
        profiling.DeviceWrapper("cpu")
    with pytest.raises(kiln.TVMError, match="number"):
        profiling.Count("3")
    assert profiling.DeviceWrapper(kiln.cpu(0)) != profiling.DeviceWrapper(kiln.cpu(1))
