"""Code identity: the code a chain runs, frozen at queue time (snapshots, one copy per file
content, each chain's view), checked before each stage, and collected by `gc`."""
