# Apache-2.0
"""chart_missing_dependencies: which declared dependencies a chart's charts/ folder lacks, by table,
and on the fork's chart as the lab's stand-in ships it (its gpu-fractioning subchart)."""
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.filter.chart_dependencies import chart_missing_dependencies

KAI_CHART = Path(__file__).resolve().parents[4] / "lab/standin/forks/kai-scheduler/deployments/kai-scheduler/Chart.yaml"
TWO = {"name": "kai-scheduler", "dependencies": [{"name": "gpu-fractioning", "version": "0.1.0"},
                                                 {"name": "metrics", "version": ">=1.0"}]}


@pytest.mark.parametrize("entries, missing", [
    ([], ["gpu-fractioning", "metrics"]),
    (["/x/charts/gpu-fractioning-0.1.0.tgz"], ["metrics"]),
    (["/x/charts/gpu-fractioning-v0.1.0.tgz", "/x/charts/metrics-1.2.0-rc1.tgz"], []),
    (["/x/charts/gpu-fractioning/", "metrics"], []),                      # unpacked folders
    (["/x/charts/gpu-fractioning-extra-0.1.0.tgz"], ["gpu-fractioning", "metrics"]),   # another chart
    (["/x/charts/gpu-fractioning.tgz", "/x/charts/README.md"], ["gpu-fractioning", "metrics"]),
])
def test_a_dependency_is_there_as_its_archive_or_its_folder(entries, missing):
    assert chart_missing_dependencies(TWO, entries) == missing


@pytest.mark.parametrize("chart", [{"name": "plain"}, {"name": "plain", "dependencies": None},
                                   {"name": "plain", "dependencies": []}])
def test_a_chart_without_dependencies_needs_none(chart):
    assert chart_missing_dependencies(chart, []) == []


def test_the_forks_chart_needs_its_subchart_until_helm_dependency_build_ran():
    chart = yaml.safe_load(KAI_CHART.read_text())
    assert chart_missing_dependencies(chart, []) == ["gpu-fractioning"]
    assert chart_missing_dependencies(chart, [str(KAI_CHART.parent / "charts" / "gpu-fractioning-0.1.0.tgz")]) == []


@pytest.mark.parametrize("chart, entries, words", [
    ("not a chart", [], "expected Chart.yaml as a mapping"),
    ({"dependencies": {"name": "x"}}, [], "dependencies is dict, not a list"),
    ({"dependencies": [{"version": "1"}]}, [], "dependencies[0] has no name"),
    ({"dependencies": []}, "charts/", "expected the charts/ folder's entries as a list"),
])
def test_what_is_no_chart_is_named(chart, entries, words):
    with pytest.raises(AnsibleFilterError, match=words.replace("[", r"\[").replace("]", r"\]")):
        chart_missing_dependencies(chart, entries)
