"""Unit tests of opsdctl/daemon/"""
