"""Recipes: the knob whitelist, recipe files, the fixed profiles, and recipe.env export."""
