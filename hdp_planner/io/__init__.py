"""Input/output helpers with no planning in them: atomic file writes, comma-separated option values, lazy package
exports."""
