"""Outlier ejection and active probes together: an endpoint that went away and came back is used again
at its first passing probe; one that only fails real traffic waits out its ejection."""

from __future__ import annotations

from sits.state.endpoint_health import HealthBoard


def _ejected_board() -> HealthBoard:
    board = HealthBoard()
    for endpoint in ("a", "b"):
        board.track(endpoint, probed=True)
        board.probe_result(endpoint, True, now=0.0)
    for _ in range(4):
        assert not board.request_failed("a", 1.0, ["a", "b"])
    assert board.request_failed("a", 1.0, ["a", "b"])  # the fifth consecutive failure ejects it for 30 s
    assert not board.available("a", 2.0)
    return board


def test_an_ejected_endpoint_that_failed_a_probe_is_back_at_its_first_passing_probe():
    board = _ejected_board()
    board.probe_result("a", False, now=5.0, error="connection refused")  # the server is down
    assert not board.available("a", 6.0)
    board.probe_result("a", True, now=10.0)  # restarted
    assert board.available("a", 10.0)


def test_an_ejected_endpoint_whose_probes_kept_passing_waits_out_the_ejection():
    board = _ejected_board()
    board.probe_result("a", True, now=5.0)  # /health answers, completions fail: not back
    assert not board.available("a", 10.0)
    assert board.available("a", 31.0)


def test_an_endpoint_restarted_between_two_probes_is_back_at_its_next_passing_probe():
    """No probe saw it down, but real traffic did: connections refused while it restarted."""
    board = _ejected_board()
    board.request_failed("a", 2.0, ["a", "b"], unreachable=True)  # connection refused
    board.probe_result("a", True, now=5.0)
    assert board.available("a", 5.0)


def test_the_evidence_of_a_restart_is_spent_by_the_passing_probe_that_readmits():
    board = _ejected_board()
    board.request_failed("a", 2.0, ["a", "b"], unreachable=True)
    board.probe_result("a", True, now=5.0)  # readmitted
    for _ in range(5):  # then it answers badly again: 5xx, not refusals
        board.request_failed("a", 6.0, ["a", "b"])
    assert not board.available("a", 7.0)
    board.probe_result("a", True, now=8.0)  # its probes pass, but it did not go away: it stays out
    assert not board.available("a", 8.0)


def test_an_unprobed_endpoint_that_went_away_is_readmitted_when_it_answers_again():
    board = HealthBoard()
    for endpoint in ("a", "b"):
        board.track(endpoint, probed=False)  # from the config file: no health check of its own
    for _ in range(5):
        board.request_failed("a", 1.0, ["a", "b"], unreachable=True)
    assert board.went_away("a") and not board.available("a", 2.0)
    board.answered("a", 3.0)  # the recovery probe got an answer
    assert board.available("a", 3.0) and not board.went_away("a")
    board.answered("b", 3.0)  # never went away: nothing changes
    assert board.available("b", 3.0)
