"""Unit tests of opsdctl/recipes/"""
