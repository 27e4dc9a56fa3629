"""The stage contract's pure parsers: what a stage leaves behind (result.json, FINAL lines,
training statistics, progress, its JSON files) read into typed records, within bounds."""
