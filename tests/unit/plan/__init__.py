"""Unit tests of opsdctl/plan/"""
