"""The package's version, in a leaf module (the tracer names it)."""

__version__ = "0.1.0.dev0"
