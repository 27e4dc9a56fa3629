"""The command line: each command parses, calls one function, and renders (rich or --json)."""
