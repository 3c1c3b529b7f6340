"""Figures (matplotlib, imported when a figure is drawn): only the CLI and the report code import this package."""
