from __future__ import annotations

import pytest

from guards import Guard, GuardChain, GuardContext, GuardResult, GuardRun, Outcome


class Fixed(Guard):
    def __init__(self, name: str, outcome: Outcome):
        self.name, self.outcome = name, outcome

    def check(self, ctx: GuardContext) -> GuardResult:
        return GuardResult(self.name, self.outcome, 1.0, "fixed")


class Broken(Guard):
    name = "broken"

    def check(self, ctx: GuardContext) -> GuardResult:
        raise KeyError("missing field")


def test_chain_runs_every_guard_times_it_and_audits_once() -> None:
    records: list[GuardRun] = []
    chain = GuardChain([Fixed("a", Outcome.PASS), Fixed("b", Outcome.FAIL)], audit=records.append)
    run = chain.run(GuardContext(question="q", answer="a"))
    assert [(r.name, r.outcome) for r in run.results] == [("a", Outcome.PASS), ("b", Outcome.FAIL)]
    assert set(run.timings_s) == {"a", "b"} and all(t >= 0 for t in run.timings_s.values())
    assert records == [run] and run.to_dict()["results"][1]["outcome"] == "fail"


def test_a_guard_that_raises_abstains_and_never_passes() -> None:
    run = GuardChain([Broken()], audit=None).run(GuardContext(question="q", answer="a"))
    result = run.results[0]
    assert result.outcome is Outcome.ABSTAIN and "KeyError" in result.reason and not result.passed


def test_guard_names_must_be_unique() -> None:
    with pytest.raises(ValueError, match="unique"):
        GuardChain([Fixed("a", Outcome.PASS), Fixed("a", Outcome.PASS)])
