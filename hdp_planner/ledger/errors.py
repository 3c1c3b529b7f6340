"""The privacy ledger's one error."""


class LedgerError(RuntimeError):
    """The ledger refuses (a budget would be exceeded, a broken chain) or cannot be read or written: one line."""
