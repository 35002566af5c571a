"""The tools of the family assistant. Each tool is a subpackage with a library API and a CLI."""
