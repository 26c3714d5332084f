"""The test files whose tests may run longest go first: the suite runs in two xdist workers that each take whole files
in collection order (`--dist loadfile`), and a half-hour file collected last ran alone at the end while the other
worker sat idle. Longest first (LPT scheduling) lets the two end together.

A file's length is the longest bound among its tests' own `timeout` marks (a long test declares one; the others run
under the default and keep their order after the long files). A pytest plugin (tests/conftest.py names it).
"""

from __future__ import annotations

import pytest


@pytest.hookimpl(trylast=True)  # after the tiers are marked and `-m` has deselected
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    longest: dict[str, float] = {}
    for item in items:
        mark = item.get_closest_marker("timeout")
        bound = float(mark.args[0]) if mark is not None and mark.args else 0.0
        longest[_file(item)] = max(bound, longest.get(_file(item), 0.0))
    items.sort(key=lambda item: -longest[_file(item)])  # stable: within a file, and among the rest


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]
