"""The command-line entry points (`enlace-search`, `enlace-assistant`). They import only the
standard library before parsing their arguments, so `--help` and usage errors are instant."""
