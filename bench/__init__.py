"""Speed and learning measurements of the local stack: `python -m bench.<name>`."""
