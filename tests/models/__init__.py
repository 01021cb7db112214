"""Provider-driver tests (a package so its helper modules import relatively)."""
