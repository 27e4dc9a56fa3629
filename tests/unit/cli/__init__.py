"""Unit tests of opsdctl/cli/"""
