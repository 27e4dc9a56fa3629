"""Unit tests of opsdkit/"""
