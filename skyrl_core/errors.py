"""The error every config check raises: one line per problem, each naming its key."""

from __future__ import annotations


class ConfigError(ValueError):
    """A config that cannot run. ``problems`` holds one line per problem, each naming its key."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))
