"""Unit tests of opsdctl/contract/"""
