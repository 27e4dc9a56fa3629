"""Unit tests of opsdctl/config.py"""
