"""Unit tests of opsdctl/run/"""
