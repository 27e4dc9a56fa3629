"""Unit tests of trainer/"""
