"""Shared code for the course notebooks: scoring, the backend seam, and the training loop."""
