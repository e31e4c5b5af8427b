"""Melee on the training side: self-play in the world model (``selfplay.py``)."""
