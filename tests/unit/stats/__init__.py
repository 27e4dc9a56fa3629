"""Unit tests of opsdctl/stats/"""
