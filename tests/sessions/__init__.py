"""Session store tests (a package so helpers import relatively, for pytest and mypy alike)."""
