"""Development support shared by ``tests/`` and ``benchmarks/``: a throwaway PostgreSQL cluster,
the loopback provider in its own process, and the load runs. Not part of the wheel (only
``agentloop`` is packaged); import it from the repository root.
"""
