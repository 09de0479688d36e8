# Apache-2.0
"""The troubleshooting table is what the checks print: each check's message for a
row is the row's symptom, cause and fix in its layout, so the page generated
from the same rows cannot say something else."""
import string

import pytest

from ansible_collections.smshare.kai.plugins.module_utils import fractioning_checks, smoke_checks
from ansible_collections.smshare.kai.plugins.module_utils import troubleshooting as ts

PARTS = ("symptom", "cause", "fix")


def placeholders(text):
    return {field[1] for field in string.Formatter().parse(text) if field[1]}


@pytest.mark.parametrize("row", ts.ROWS, ids=lambda r: r["id"])
def test_row_shape(row):
    assert set(PARTS) <= set(row) and row["check"] in (None,) + tuple(ts.CHECKS)
    if row["check"] is None:
        assert row.get("note") and "layout" not in row
    else:
        assert placeholders(row["layout"]) <= set(PARTS)
        needed = set().union(*(placeholders(row[p]) for p in PARTS))
        assert needed == set(row.get("example") or {}), "every placeholder has a page value"


def test_ids_are_unique():
    assert len(ts.BY_ID) == len(ts.ROWS)


def test_the_smoke_tests_event_rows_are_the_tables():
    assert smoke_checks.TROUBLESHOOTING == ts.event_rows()
    assert [r[0] for r in smoke_checks.TROUBLESHOOTING] == [
        "gpu_memory_label_missing", "memory_limit_hook_unsupported", "mps_namespace_refused"]
    assert smoke_checks.MISMATCHED_FORKS == ts.message("forks_mismatched")


LOGS = [{"pod": "mpsd-1", "node": "gpu-1", "component": "mpsd", "log": "E CUDA_ERROR_OUT_OF_MEMORY"},
        {"pod": "fd-1", "node": "gpu-1", "component": "fractiond", "log": "NRI socket /x.sock not available"}]
CONFIG = {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "GPUOperatorVersionUnsupported",
                                     "message": "v26.3.0 is below v26.7.1"}]}}


@pytest.mark.parametrize("row_id", ["mpsd_out_of_memory", "fractiond_not_registered",
                                    "gpu_operator_version_unsupported"])
def test_the_verify_prints_the_rows_words(row_id, monkeypatch):
    """Change a row's fix: the verify's message changes with it."""
    found = {s["symptom"]: s["message"] for s in fractioning_checks.symptoms(LOGS, CONFIG, {}, [])}
    assert set(found) == {"mpsd_out_of_memory", "fractiond_not_registered", "gpu_operator_version_unsupported"}
    row = dict(ts.BY_ID[row_id], fix="THE FIX FROM THE TABLE")
    monkeypatch.setitem(ts.BY_ID, row_id, row)
    changed = {s["symptom"]: s["message"] for s in fractioning_checks.symptoms(LOGS, CONFIG, {}, [])}
    assert "THE FIX FROM THE TABLE" in changed[row_id] and "THE FIX FROM THE TABLE" not in found[row_id]


def test_the_pending_diagnosis_prints_the_event_rows():
    events = [{"reason": "BindingError", "message": "node gpu-1 does not include nvidia.com/gpu.memory label"}]
    [(cause, text)] = smoke_checks._troubleshooting(events)
    assert cause == "gpu_memory_label_missing"
    assert text.startswith(ts.message("gpu_memory_label_missing"))
    row = ts.BY_ID["gpu_memory_label_missing"]
    assert row["cause"] in text and row["fix"] in text


def test_a_reservation_pod_without_runtime_class_is_the_rows_text():
    pod = {"metadata": {"name": "gpu-reservation-gpu-1-x", "namespace": "kai-resource-reservation"},
           "spec": {"nodeName": "gpu-1"}, "status": {}}
    text, hard = smoke_checks._reservation_problem(pod, [], None)
    assert hard and ts.message("reservation_pod_no_runtime_class") in text
