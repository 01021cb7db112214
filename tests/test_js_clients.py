"""The pinned JavaScript clients are the ones installed, on a Node they support."""

from __future__ import annotations

from tests.support.node import MIN_MAJOR, run_script


async def test_the_installed_clients_are_the_pinned_ones() -> None:
    """`npm ci` installed exactly the versions tests/js/package.json pins (aliases included)."""
    found = await run_script("versions.mjs")
    assert int(found["node"].split(".")[0]) >= MIN_MAJOR
    expected = {name: pin.rpartition("@")[2] for name, pin in found["pins"].items()}
    assert found["installed"] == expected
