"""Errors of our own layers. The model's mistakes are values, not these."""

from __future__ import annotations


class SqaleError(Exception):
    """Base of every error this project raises on purpose; the message says what to do next."""


class DatabasePathError(SqaleError):
    """A configured database path is missing, not a file, or not an SQLite database."""


class DatabaseBusyError(SqaleError):
    """Another program holds a database file locked (a writer) past the busy wait: try again later."""


class DatabaseWorkerError(SqaleError):
    """The SQLite worker process failed in a way a retry will not fix."""


class BackendError(SqaleError):
    """The model runtime failed; subclasses say how."""


class BackendUnreachable(BackendError):
    """The runtime did not answer at its address."""


class ModelNotFound(BackendError):
    """The runtime answered but does not have the model."""


class BackendTimeout(BackendError):
    """The runtime took longer than the request timeout."""


class BackendAuthError(BackendError):
    """The runtime refused our credentials (HTTP 401/403)."""


class BackendResponseError(BackendError):
    """The runtime answered with an error or a reply we cannot read."""


class PromptConfigError(SqaleError):
    """A prompt file or reference agent could not be read or lacks the expected strings."""


class ConfigError(SqaleError):
    """Settings given on the command line or in a config file are invalid."""
