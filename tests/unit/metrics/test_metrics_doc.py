"""docs/metrics.md's reference is generated from the metrics the code declares."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.metrics_doc import BEGIN, END, load_all, main, render

ASKED_FOR = {
    "joiner_nodepools_usage",
    "joiner_nodepools_limit",
    "joiner_nodes_allocatable",
    "joiner_nodes_total_pod_requests",
    "joiner_pods_startup_duration_seconds",
    "joiner_nodes",
    "joiner_nodes_price_per_hour",
    "joiner_controller_reconcile_errors_total",
    "joiner_controller_start_time_seconds",
    "joiner_controller_restarts_total",
    "joiner_build_info",
}


def test_every_declared_metric_is_listed_with_its_type_and_labels() -> None:
    specs = load_all()
    assert set(specs) >= ASKED_FOR
    doc = render(f"# prose\n\n{BEGIN}\nSTALE-ROW\n{END}\n\nmore prose\n", specs)
    assert doc.startswith("# prose\n\n")
    assert doc.endswith("\n\nmore prose\n")
    assert "STALE-ROW" not in doc
    for name, spec in specs.items():
        assert f"| `{name}` | {spec.type} |" in doc
    assert "| `joiner_nodepools_usage` | gauge | `nodepool`, `resource_type` |" in doc


def test_the_committed_doc_is_up_to_date() -> None:
    assert main(["--check"]) == 0


def test_check_fails_on_drift_and_a_rewrite_fixes_it(tmp_path: Path) -> None:
    doc = tmp_path / "metrics.md"
    doc.write_text(f"intro\n{BEGIN}\n| `joiner_removed_long_ago` |\n{END}\n")
    assert main(["--check", "--doc", str(doc)]) == 1
    assert main(["--doc", str(doc)]) == 0
    assert main(["--check", "--doc", str(doc)]) == 0
    assert "joiner_removed_long_ago" not in doc.read_text()


def test_a_doc_without_markers_is_a_clear_error(tmp_path: Path) -> None:
    doc = tmp_path / "metrics.md"
    doc.write_text("no markers\n")
    with pytest.raises(ValueError, match="needs the markers"):
        main(["--doc", str(doc)])
