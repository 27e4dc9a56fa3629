"""Torch-side pieces shared by trainer/ and eval/: tiny offline assets, model loading, the
out-of-place LoRA merge, prompts. Importing this package alone imports nothing heavy."""
