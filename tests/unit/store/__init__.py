"""Unit tests of opsdctl/store/"""
