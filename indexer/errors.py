"""One error type for the indexer: the CLI turns it into a message and exit code 2."""


class IndexerError(Exception):
    """A user-facing problem (bad file, bad option); the message names the file and the fix."""
