"""Alembic revision files, one per schema change, named by their revision id."""
