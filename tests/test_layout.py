"""The package's layout, drawn from its own import statements (tests/support/import_graph.py): no circle
between files, and no import from a lower stage to a higher one (the stage order of
../shared/design/layout.md, as import_graph.STAGES writes it and says where it differs)."""

from __future__ import annotations

import import_graph


def test_the_graph_sees_every_module_and_its_imports():
    graph = import_graph.graph()
    assert "databuild.build" in graph and "databuild.records.conversation" in graph
    assert "databuild.records.conversation" in graph["databuild.encode.encoder"]  # an import it must find
    assert all(import_graph.stage(name) >= 0 for name in graph), "a module outside every stage"


def test_no_circle_between_files():
    assert import_graph.circles(import_graph.graph()) == []


def test_no_arrow_from_a_lower_stage_to_a_higher_one():
    assert import_graph.upward_arrows(import_graph.graph()) == []


def test_the_checks_can_fail():
    """A planted circle and a planted upward arrow are found (the checks above are not vacuous)."""
    graph = {"databuild.records.row": {"databuild.build"}, "databuild.build": {"databuild.records.row"}}
    assert import_graph.circles(graph) == [["databuild.build", "databuild.records.row"]]
    assert import_graph.upward_arrows(graph) == [("databuild.records.row", "databuild.build")]
