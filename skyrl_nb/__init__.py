"""skyrl-nb: RL post-training of language models from a notebook."""

__version__ = "0.1.0"
