"""The bug's control flow on a real worker process, no vLLM: a 2 s deadline, a stand-in
``EngineDeadError``, and a worker that computes, idles or exits (``procs.py``, copied beside
this file; its mode and seconds come from ``worker.json``).

What the test saw is written to files for the outer test to read: ``worker.pid``,
``same-object`` (whether the error that reached the test was the very one raised) and
``verdicts``.
"""

import json
from pathlib import Path

import procs
from pytest_enginedead import assert_no_false_death


def test_engine_step():
    worker = json.loads(Path("worker.json").read_text())
    with procs.worker(worker["mode"], worker["seconds"]) as proc:
        Path("worker.pid").write_text(str(proc.pid))
        engine = procs.FakeEngine([proc.pid])
        raised = []
        try:
            with assert_no_false_death(engine, errors=procs.StandInError):
                procs.call_worker(proc, deadline_s=2.0, raised=raised)
        except procs.StandInError as exc:
            same = bool(raised) and exc is raised[0] and type(exc) is procs.StandInError
            Path("same-object").write_text(str(same))
            raise
        finally:
            Path("verdicts").write_text(",".join(d["verdict"] for d in engine.deaths))
