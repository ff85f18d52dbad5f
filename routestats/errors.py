"""User-facing errors. The CLI turns any :class:`RoutestatsError` into one line and exit 2."""


class RoutestatsError(ValueError):
    """Base class of every error caused by user input (bad run, bad option, bad data)."""


class RunFormatError(RoutestatsError):
    """A run directory breaks the contract in :mod:`routestats.rundir.schema`."""


class IncompleteRunError(RunFormatError):
    """A run directory has no ``run.json`` (still being written, or killed)."""


class SchemaVersionError(RunFormatError):
    """The run was written with a schema version this routestats cannot read."""


class PairingError(RoutestatsError):
    """Two runs cannot be paired (different init, data order or evaluated examples)."""


class IntegrityError(RunFormatError):
    """A verified input changed while it was being analysed (its SHA-256 no longer matches the manifest):
    nothing computed from it is published, not even the other sections."""
