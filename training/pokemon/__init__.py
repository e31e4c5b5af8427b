"""Pokémon on the training side: the live player (``player.py``) and self-play in real battles (``selfplay.py``)."""
