"""The skyrl-nb trainer engine: runs on the Ray cluster, writes the run store."""
