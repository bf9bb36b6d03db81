"""The one error of the migration: it cannot go on, and the message says why and what to do."""


class MigrationError(Exception):
    """A migration cannot go on; the message says why and what to do."""
