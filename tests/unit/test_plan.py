from cluster.placement.plan import peak_rate_rps
from workloads.schedule import PlannedRequest


def req(i, t):
    return PlannedRequest(index=i, send_offset_s=t, prompt_tokens=1, max_tokens=1)


def test_peak_rate_is_the_busiest_second():
    times = [0.0, 0.1, 0.2, 5.0, 5.05, 5.1, 5.2, 5.3, 9.0]
    assert peak_rate_rps([req(i, t) for i, t in enumerate(times)]) == 5.0
    assert peak_rate_rps([]) == 0.0
