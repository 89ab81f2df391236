"""The tool's errors, and the exit code each one means (mapped here and nowhere else).

Exit codes of every verb: 0 done / clean, 1 findings or refused, 2 could not run (bad input, settings,
an unreadable or unauditable store).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_CANNOT = 2


class RmqStoreError(Exception):
    """Base of every error the tool reports to a person (never as a traceback)."""

    exit_code = EXIT_CANNOT


class BadInput(RmqStoreError, ValueError):
    """Arguments, settings or input files that cannot be used: exit 2."""


class StoreFormatError(BadInput):
    """Bad bytes in a store file; always names the file and the byte offset."""

    def __init__(self, message: str, file: str = "", offset: int | None = None) -> None:
        self.file = file
        self.offset = offset
        where = file
        if offset is not None:
            where = f"{file} @ {offset}" if file else f"offset {offset}"
        super().__init__(f"{where}: {message}" if where else message)
        self.reason = message


class HostileNameError(StoreFormatError):
    """A topic or queue name that is not a legal RocketMQ name (never becomes a path)."""


class ConfigError(BadInput):
    """A broker properties file value that cannot be used."""


class AmbiguousRelease(ConfigError):
    """The store's clues allow broker releases whose rules write different files for it: ``--broker-version``
    must say which (exit 2); ``choices`` are the first releases of those rule sets."""

    def __init__(self, message: str, choices: list[str]) -> None:
        super().__init__(message)
        self.choices = choices


class CannotAudit(RmqStoreError):
    """The store could not be audited (exit 2): no store, a stale rebuild, an unreadable table."""


class CannotCompare(RmqStoreError):
    """Two stores could not be compared (exit 2): a damaged log whose records after the damage were not read."""


class CannotSend(RmqStoreError):
    """A replay's client could not be fetched, built or started, or stopped answering (exit 2); what it had sent is
    in the journal."""


class Refused(RmqStoreError):
    """A verb refuses to act on this store (exit 1); the message says why."""

    exit_code = EXIT_FINDINGS


class DamageStop(RmqStoreError):
    """The rebuild stopped on damage; nothing was published (exit 1). ``findings`` say where and why."""

    exit_code = EXIT_FINDINGS

    def __init__(self, message: str, findings: list) -> None:
        super().__init__(message)
        self.findings = findings


def exit_code(exc: BaseException) -> int:
    """The exit code for an error that ends a verb: the tool's own, 2 for missing or unreadable files."""
    if isinstance(exc, RmqStoreError):
        return exc.exit_code
    return EXIT_CANNOT
