"""A module with known functions, for the golden 'no such function' error."""


def train(config):
    """A train function."""


def evaluate(config):
    """Another function."""
