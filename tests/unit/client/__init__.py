"""Unit tests of opsdctl/client/"""
