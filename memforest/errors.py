"""Every error MemForest raises on purpose derives from MemForestError."""


class MemForestError(Exception):
    """Base class: a clear, user-facing message; the store is unchanged."""


class InputError(MemForestError):
    """Malformed session, turn, identifier or option."""


class StoreError(MemForestError):
    """The store is missing, locked, or fails its invariants."""


class ModelError(MemForestError):
    """A model call failed after its retries (timeout, server error, invalid output)."""


class ConfigError(MemForestError):
    """A configuration cannot be built (unknown backend, missing package, bad value)."""
