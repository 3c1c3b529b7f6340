"""Distributed discrete noise for secure aggregation: exact integer sampling, encoding, and its accounting."""
