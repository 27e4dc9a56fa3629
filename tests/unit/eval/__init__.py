"""Unit tests of eval/"""
