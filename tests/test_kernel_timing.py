"""simfuse.kernels.timing: percentiles, the host path and input checks (the CUDA path runs in make gpu-check)."""

import pytest

torch = pytest.importorskip("torch")
timing = pytest.importorskip("simfuse.kernels.timing")


def test_quantiles_nearest_rank():
    ts = [float(x) for x in range(1, 12)]  # 1..11: median 6, p10 at rank round(0.1 * 10) = 1 -> 2, p90 -> 10
    assert timing.quantiles(ts) == (6.0, 2.0, 10.0)
    assert timing.quantiles([3.0]) == (3.0, 3.0, 3.0)
    assert timing.quantiles([5.0, 1.0]) == (3.0, 1.0, 5.0)
    with pytest.raises(ValueError):
        timing.quantiles([])


@pytest.mark.skipif(torch.cuda.is_available(), reason="host path only")
def test_host_path_counts_calls_and_divides():
    calls = []
    t = timing.graph_bench(lambda: calls.append(1), reps=5, per_call=4, host_reps=3)
    assert t.method == "host" and t.replays == 3
    assert len(calls) == 1 + 3  # one warm-up run, then host_reps timed runs
    assert 0 <= t.p10_s <= t.median_s <= t.p90_s
    assert t.as_tuple() == (t.median_s, t.p10_s, t.p90_s)


def test_rejects_bad_counts():
    with pytest.raises(ValueError):
        timing.graph_bench(lambda: None, reps=0)
    with pytest.raises(ValueError):
        timing.graph_bench(lambda: None, per_call=0)
