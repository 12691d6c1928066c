"""tracekit's version (its own module: the disk cache keys on it without importing the package)."""

__version__ = "0.1.0"
