"""A privacy ledger that outlives runs: every client's spending, composed over everything it took part in."""
