"""The tuning loop with scripted probes (no Ray): what it keeps, reverts, writes and prints."""

import contextlib
import dataclasses
import json
from pathlib import Path

import pytest
import yaml

import pipeline.cluster.session
from pipeline.cli.main import main
from pipeline.config import ConfigError, load_config
from pipeline.tune import Budget, Change, Probe, Tuner

ROOT = Path(__file__).resolve().parents[3]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"


class Script:
    """Stands in for ``Tuner.probe``: returns the scripted probes in order, advancing a clock."""

    def __init__(self, probes, seconds=60.0):
        self.probes, self.seconds, self.now, self.calls = list(probes), seconds, 0.0, []

    def clock(self):
        return self.now

    def __call__(self, tuner, name, changes):
        self.calls.append((name, tuple(changes)))
        self.now += self.seconds
        item = self.probes.pop(0)
        if isinstance(item, Exception):
            raise item
        config = load_config(QUICKSTART, [*tuner.sets, *(c.as_set() for c in changes)])
        return dataclasses.replace(item, seconds=self.seconds), config


def more_actors(n):
    return Change(key="data.concurrency", value=[1, n], why="input-bound")


@pytest.fixture
def scripted(monkeypatch):
    def install(probes, seconds=60.0):
        script = Script(probes, seconds)
        monkeypatch.setattr(Tuner, "probe", lambda self, name, changes: script(self, name,
                                                                               changes))
        monkeypatch.setattr(pipeline.cluster.session, "ray_session",
                            lambda *a, **k: contextlib.nullcontext())
        return script
    return install


def tuner(tmp_path, script, **budget):
    return Tuner(QUICKSTART, sets=["train.epochs=2"], output=tmp_path / "tune",
                 budget=Budget(**({"max_trials": 4, "budget_s": 1000} | budget)),
                 show_progress=False, clock=script.clock)


def test_keeps_what_helped_reverts_what_hurt_and_writes_tuned_yaml(tmp_path, scripted):
    script = scripted([
        Probe(samples_per_s=30, verdict="input_bound", changes=(more_actors(4),)),
        Probe(samples_per_s=50, verdict="input_bound", changes=(more_actors(8),)),
        Probe(samples_per_s=40, verdict="compute_bound", changes=()),
    ])
    outcome = tuner(tmp_path, script).run()
    # trial 2 is tried on top of trial 1's kept change (the same key: its new value)
    assert script.calls == [("probe-0-baseline", ()), ("trial-1", (more_actors(4),)),
                            ("trial-2", (more_actors(8),))]
    assert [t.kept for t in outcome.trials] == [True, False]
    assert outcome.kept == (more_actors(4),)
    assert outcome.final.samples_per_s == 50
    assert outcome.trials[1].reason.startswith("throughput fell to 0.80x")
    # the reverted trial's diagnosis named nothing, the kept state's advice was tried
    assert outcome.stopped.startswith("no advice is left that was not tried already")
    tuned = yaml.safe_load((tmp_path / "tune" / "tuned.yaml").read_text())
    assert tuned["data"]["concurrency"] == [1, 4]
    assert tuned["train"]["epochs"] == 2  # the user's --set stays
    assert load_config(tuned).data.concurrency == (1, 4)
    report = json.loads((tmp_path / "tune" / "tune.json").read_text())
    assert [t["kept"] for t in report["trials"]] == [True, False]
    assert report["trials"][1]["ratio"] == pytest.approx(0.8)
    assert report["kept"] == [{"key": "data.concurrency", "value": [1, 4], "why": "input-bound",
                               "together": ""}]


def test_a_trial_applies_only_the_first_change_named(tmp_path, scripted):
    deeper = Change(key="transfer.host_prefetch", value=4)
    script = scripted([Probe(samples_per_s=30, verdict="input_bound",
                             changes=(more_actors(4), deeper)),
                       Probe(samples_per_s=20, verdict="input_bound", changes=()),
                       Probe(samples_per_s=29, verdict="input_bound", changes=())])
    outcome = tuner(tmp_path, script).run()
    assert script.calls[1] == ("trial-1", (more_actors(4),))
    # a trial that did not help is reverted and the next advice tried (issue 31)
    assert script.calls[2] == ("trial-2", (deeper,))
    assert outcome.kept == () and len(outcome.trials) == 2


def test_after_a_neutral_trial_its_own_advice_comes_first_then_the_rest(tmp_path, scripted):
    deeper = Change(key="transfer.host_prefetch", value=4)
    cache = Change(key="data.cache", value="memory")
    script = scripted([
        Probe(samples_per_s=30, verdict="input_bound", changes=(more_actors(4), deeper)),
        Probe(samples_per_s=30.5, verdict="input_bound", changes=(cache,)),  # no gain
        Probe(samples_per_s=30.2, verdict="input_bound", changes=()),  # the cache: no gain
        Probe(samples_per_s=45, verdict="compute_bound", changes=()),  # deeper prefetch: kept
    ])
    outcome = tuner(tmp_path, script).run()
    assert [c for _, c in script.calls[1:]] == [(more_actors(4),), (cache,), (deeper,)]
    assert [t.kept for t in outcome.trials] == [False, False, True]
    assert outcome.kept == (deeper,)
    assert outcome.stopped.startswith("no advice is left")
    assert "no change helped" not in (tmp_path / "tune" / "tuned.yaml").read_text()


def test_stops_when_no_untried_advice_is_left_and_keeps_nothing(tmp_path, scripted):
    script = scripted([
        Probe(samples_per_s=30, verdict="input_bound", changes=(more_actors(4),)),
        Probe(samples_per_s=30.5, verdict="input_bound", changes=(more_actors(8),)),
        Probe(samples_per_s=30.2, verdict="input_bound", changes=()),
    ])
    outcome = tuner(tmp_path, script).run()
    assert len(outcome.trials) == 2 and outcome.kept == ()
    assert "still input_bound" in outcome.trials[0].reason
    assert outcome.stopped == ("no advice is left that was not tried already (the verdict: "
                               "input_bound)")
    text = (tmp_path / "tune" / "tuned.yaml").read_text()
    assert "no change helped" in text
    assert yaml.safe_load(text)["data"]["concurrency"] == [1, 1]  # the quickstart's own value


def test_budget_bounds_a_session_that_keeps_improving(tmp_path, scripted):
    script = scripted([Probe(samples_per_s=rate, verdict="input_bound",
                             changes=(more_actors(n),))
                       for rate, n in ((30, 2), (40, 3), (50, 4), (60, 5))], seconds=100)
    outcome = tuner(tmp_path, script, budget_s=250).run()
    assert len(script.calls) == 2
    assert "--budget-s 250" in outcome.stopped
    assert outcome.kept == (more_actors(2),)


def test_stops_at_max_trials(tmp_path, scripted):
    script = scripted([Probe(samples_per_s=rate, verdict="input_bound",
                             changes=(more_actors(n),))
                       for rate, n in ((30, 2), (40, 3), (50, 4))])
    outcome = tuner(tmp_path, script, max_trials=2).run()
    assert outcome.stopped == "reached --max-trials 2"
    assert outcome.kept == (more_actors(3),)  # a later value of the same key replaces it


def test_a_failed_trial_is_reverted_and_recorded(tmp_path, scripted):
    script = scripted([Probe(samples_per_s=30, verdict="input_bound",
                             changes=(more_actors(64),)),
                       RuntimeError("plan refused: 64 actors need 64 CPUs\nmore")])
    outcome = tuner(tmp_path, script).run()
    [trial] = outcome.trials
    assert trial.after is None and not trial.kept
    assert "RuntimeError: plan refused: 64 actors need 64 CPUs" in trial.reason
    assert outcome.stopped.startswith("no advice is left")
    report = json.loads((tmp_path / "tune" / "tune.json").read_text())
    assert report["trials"][0]["after"] is None and report["kept"] == []


def test_cli_prints_the_table_and_exits_0_when_nothing_helped(tmp_path, scripted, capsys):
    scripted([Probe(samples_per_s=30, verdict="compute_bound", changes=())])
    code = main(["tune", str(QUICKSTART), "--output", str(tmp_path / "t"), "--set",
                 "train.epochs=2"])
    assert code == 0
    out = capsys.readouterr().out
    assert "(baseline)" in out and "compute_bound" in out
    assert "no advice is left" in out and "no change helped" in out


def test_cli_refuses_bad_budget_and_a_used_output(tmp_path, capsys):
    assert main(["tune", str(QUICKSTART), "--max-trials", "0",
                 "--output", str(tmp_path)]) == 2
    assert "--max-trials (0) must be >= 1" in capsys.readouterr().err
    (tmp_path / "tune.json").write_text("{}")
    with pytest.raises(ConfigError, match="already holds a tune session"):
        Tuner(QUICKSTART, output=tmp_path, budget=Budget(max_trials=1, budget_s=10))
