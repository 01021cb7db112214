"""Type checks of the public API: ``assert_type`` lines, and wrong uses that must be rejected.

These modules are read by type checkers, never run (pytest does not collect them: no file is
named ``test_*``). CI checks them with ``mypy --strict`` and ``pyright`` (strict, configured in
``pyproject.toml``). A wrong use carries ``# type: ignore[code]`` for mypy and
``# pyright: ignore[rule]`` for pyright; both checkers report an ignore that is not needed
(mypy's ``warn_unused_ignores``, pyright's ``reportUnnecessaryTypeIgnoreComment``, and pyright
does not honour ``# type: ignore`` here), so a wrong use that stopped being an error fails them.

(Not ``tests/typing``: a script run from ``tests/`` has that folder first on ``sys.path``, where
a package named ``typing`` would hide the standard library's.)
"""
